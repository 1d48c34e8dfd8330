import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, type StoredEvent, type TraceAnswer, type TraceContent } from './api.js';

/** The server's largest page (`limit` 1–5,000). */
const PAGE = 5000;
const NO_EVENTS: readonly StoredEvent[] = [];
const NO_CONTENT: TraceContent = {};

export interface TraceFeed {
  /** Every stored event of the session and its workers, in id order: the same array until one is added. */
  readonly events: readonly StoredEvent[];
  readonly content: TraceContent;
  /** How many events the first load has read so far; null once the feed holds the whole trace. */
  readonly loading: number | null;
  readonly error: ApiError | null;
  /** Asks for what is new now rather than at the next poll (e.g. after the page added an event). */
  readonly refresh: () => void;
}

interface Held {
  readonly sessionId: string;
  readonly events: readonly StoredEvent[];
  readonly content: TraceContent;
  readonly loading: number | null;
}

/**
 * A session's whole trace (its workers' too), paged through once with the `after=` cursor, then
 * every `everyMs` only the events stored after the last one held. Errors are reported and what is
 * shown stays, as with usePolled; the next poll carries on from the same cursor.
 */
export function useTraceFeed(
  sessionId: string,
  everyMs: number,
  report: (error: unknown) => void,
): TraceFeed {
  const [held, setHeld] = useState<Held>(() => startOf(sessionId));
  const [error, setError] = useState<ApiError | null>(null);
  const reportRef = useRef(report);
  reportRef.current = report;
  const pollNow = useRef<() => void>(() => {});
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let polling = false;
    let again = false;
    let state = startOf(sessionId);
    setHeld(state);
    const read = async (after: string | null, limit = PAGE) => {
      const cursor = after === null ? '' : `&after=${encodeURIComponent(after)}`;
      const path = `/sessions/${encodeURIComponent(sessionId)}/trace?include_worker_sessions=true&limit=${limit}`;
      return api<TraceAnswer>('GET', path + cursor);
    };
    const poll = async () => {
      const fresh: StoredEvent[] = [];
      let content = state.content;
      let lastPageFrom = state.events.length;
      for (let more = true; more; ) {
        const answer = await read(fresh.at(-1)?.id ?? state.events.at(-1)?.id ?? null);
        if (stopped) return;
        lastPageFrom = state.events.length + fresh.length;
        fresh.push(...answer.events);
        if (answer.events.length > 0) content = { ...content, ...answer.content };
        more = answer.has_more && answer.events.length > 0;
        if (more && state.loading !== null)
          setHeld({ ...state, loading: state.events.length + fresh.length });
      }
      const events = fresh.length === 0 ? state.events : state.events.concat(fresh);
      content = await refreshedContent(events, content, fresh, lastPageFrom, read);
      if (stopped) return;
      if (events !== state.events || content !== state.content || state.loading !== null)
        state = { sessionId, events, content, loading: null };
      setHeld(state);
      setError(null);
    };
    const run = async () => {
      clearTimeout(timer);
      if (polling) {
        again = true;
        return;
      }
      polling = true;
      do {
        again = false;
        try {
          await poll();
        } catch (caught) {
          if (stopped) return;
          const failure =
            caught instanceof ApiError ? caught : new ApiError(0, 'unreachable', String(caught));
          setError(failure);
          reportRef.current(failure);
        }
      } while (again && !stopped);
      polling = false;
      if (!stopped && everyMs > 0) timer = setTimeout(run, everyMs);
    };
    pollNow.current = () => void run();
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [sessionId, everyMs]);
  // A render between a change of session and its effect must not show the previous session's trace.
  const shown = held.sessionId === sessionId ? held : startOf(sessionId);
  return { ...shown, error, refresh: () => pollNow.current() };
}

function startOf(sessionId: string): Held {
  return { sessionId, events: NO_EVENTS, content: NO_CONTENT, loading: 0 };
}

/**
 * A span's content is read when its opening event is, so a span still running then (a model call
 * without its output yet) is asked for again, alone, once events of its turn arrive. Entries from the
 * last page are as new as the events held and need no second read.
 */
async function refreshedContent(
  events: readonly StoredEvent[],
  content: TraceContent,
  fresh: readonly StoredEvent[],
  lastPageFrom: number,
  read: (after: string | null, limit: number) => Promise<TraceAnswer>,
): Promise<TraceContent> {
  if (fresh.length === 0) return content;
  const activeTurns = new Set(fresh.map((event) => event.turn_id));
  const stale = Object.entries(content).flatMap(([id, entry]) => {
    if (!('status' in entry) || entry.status !== 'running') return [];
    const at = indexOfId(events, id);
    if (at < 0 || at >= lastPageFrom || !activeTurns.has(events[at]!.turn_id)) return [];
    return [{ id, after: at === 0 ? null : events[at - 1]!.id }];
  });
  if (stale.length === 0) return content;
  const answers = await Promise.all(stale.map(({ after }) => read(after, 1)));
  let updated = content;
  stale.forEach(({ id }, index) => {
    const entry = answers[index]!.content?.[id];
    if (entry === undefined || JSON.stringify(entry) === JSON.stringify(content[id])) return;
    if (updated === content) updated = { ...content };
    updated[id] = entry;
  });
  return updated;
}

/** Events are in id order (ULIDs compare as strings): a binary search, not a scan of a long trace. */
function indexOfId(events: readonly StoredEvent[], id: string): number {
  let low = 0;
  let high = events.length - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const at = events[middle]!.id;
    if (at === id) return middle;
    if (at < id) low = middle + 1;
    else high = middle - 1;
  }
  return -1;
}
