import type { MetisEvent } from '../events/envelope.js';
import type { EventJsonRow } from '../store/event-rows.js';
import type { ReplayResult } from '../store/stream-reads.js';
import type { SubscribeFrame } from './client-frames.js';
import type { ConnectionDeps, ReplayOutcome } from './connection-deps.js';
import { cursorProblem } from './cursor.js';
import { NO_FAULTS } from './faults.js';
import { mergeReplay, mergeRows, type ReplayFrame, unionById } from './replay-merge.js';
import { buildSnapshot } from './snapshot.js';
import { snapshotPoint } from './snapshot-point.js';
import { isQuestionToUser } from './stream-hub.js';
import {
  compileFilter,
  type ResolvedFilter,
  resolveFilter,
  sessionIdsProblem,
  wantsStreaming,
} from './subscription-filter.js';

/** What a connection knows of itself when its subscribe arrives. */
export interface Subscriber {
  readonly sessionId: string;
  /**
   * Every event released to it since accept (§3.7 step 1), or, when `early`, since the subscribe began.
   * Read when the plan completes, after the store's reads: it keeps growing while they are under way.
   */
  readonly buffer: readonly MetisEvent[];
  /**
   * More than `maxQueueEvents` arrived before subscribe: the buffer was dropped and the socket is served
   * by cursor instead, from `acceptedAfterId` out of the store and RecentStreams (issue 14 obs. 8).
   */
  readonly early: boolean;
  /** The last event released before accept: `buffer` holds everything after it. */
  readonly acceptedAfterId: string | null;
}

/** A subscription the connection can serve: what it sends before going live, in this order. */
export interface Accepted {
  readonly ok: true;
  /** Live only, a snapshot (and what is in progress at its point, as events), or a replay from a cursor. */
  readonly kind: 'live' | 'snapshot' | 'replay';
  readonly resolved: ResolvedFilter;
  readonly matches: (event: MetisEvent) => boolean;
  readonly sessionIds: ReadonlySet<string>;
  readonly snapshot: string | null;
  readonly replay: readonly ReplayFrame[];
  /** What arrived since accept, minus what the snapshot or the replay covered (§3.7 step 4). */
  readonly seam: readonly MetisEvent[];
}

/**
 * The store's reads of a subscription are done: `complete` works out what goes out, from them and from
 * what was released to the connection meanwhile. The connection calls it and goes live in one
 * synchronous step, so nothing released can fall between the two.
 */
export interface Ready {
  readonly ok: true;
  complete(): Accepted | Refused;
}

/** A subscription refused with a `subscribe_error`. */
export interface Refused {
  readonly ok: false;
  readonly code: string;
  readonly message: string;
  /** For the replay metrics: a cursor that could not be served, and the events it would have replayed. */
  readonly outcome: ReplayOutcome | null;
  readonly events: number;
}

type Deps = Pick<ConnectionDeps, 'hub' | 'reads' | 'runtime' | 'options' | 'faults'>;

interface Scope {
  readonly deps: Deps;
  readonly subscriber: Subscriber;
  readonly resolved: ResolvedFilter;
  readonly sessionIds: ReadonlySet<string>;
  readonly matches: (event: MetisEvent) => boolean;
  /** Every session below the subscriber's (its workers, theirs), parents first. */
  readonly descendants: readonly string[];
}

const refuse = (
  code: string,
  message: string,
  outcome: ReplayOutcome | null = null,
  events = 0,
): Refused => ({
  ok: false,
  code,
  message,
  outcome,
  events,
});

/**
 * What a replay read of the store: the session's own events, its workers' questions, and the streaming
 * events (memory or the archive) as they stood when the reads began: what was released to the
 * connection since is in its buffer. With `gap`, why a replay from there would miss streaming events.
 */
interface StoredReplay {
  readonly own: ReplayResult<EventJsonRow>;
  readonly questions: ReplayResult<EventJsonRow>;
  readonly streamed: readonly MetisEvent[];
  readonly gap: string | null;
}

/**
 * The subscribe step (streaming §3.2–§3.7): checks the filter, reads the store, then works out the
 * snapshot or the replay and the seam, so that what the connection sends, followed by the live events
 * past it, has no gap and no duplicate. What was released to clients is taken before the first read;
 * everything released after it is in the subscriber's buffer when `complete` runs. `cursorReplay` sees
 * a cursor's replay frames before they are counted and sent (the identity but for the
 * duplicate-replay fault, faults.ts).
 */
export async function planSubscription(
  deps: Deps,
  subscriber: Subscriber,
  frame: SubscribeFrame,
  cursorReplay: (frames: ReplayFrame[]) => ReplayFrame[],
): Promise<Ready | Refused> {
  const { runtime, reads, hub, options } = deps;
  const { sessionId } = subscriber;
  if (!(await runtime.knowsSession(sessionId))) return refuse('session_not_found', `no session ${sessionId}`);
  const resolution = resolveFilter(frame.filter);
  if (!resolution.ok)
    return refuse('invalid_filter', `unknown event types in filter: ${resolution.unknown.join(', ')}`);
  const resolved = resolution.filter;
  // The workers a planner's stream carries are its own (streaming §7.2), as the hub routes them.
  const lineage = await reads.lineage(sessionId);
  const workers = lineage.filter((row) => row.parent_session_id === sessionId).map((row) => row.id);
  const scopeProblem = sessionIdsProblem(resolved, sessionId, workers);
  if (scopeProblem !== null) return refuse('invalid_filter', scopeProblem);
  const sessionIds = new Set(
    resolved.session_ids ?? [sessionId, ...(resolved.include_worker_sessions ? workers : [])],
  );
  const matches = compileFilter(resolved, sessionId);
  const descendants = lineage.slice(1).map((row) => row.id);
  const scope: Scope = { deps, subscriber, resolved, sessionIds, matches, descendants };
  const accepted = (
    kind: Accepted['kind'],
    snapshot: string | null,
    replay: ReplayFrame[],
    skipUpTo: string | null,
  ): Accepted => ({
    ok: true,
    kind,
    resolved,
    matches,
    sessionIds,
    snapshot,
    replay,
    seam: kind === 'replay' ? [] : seamOf(scope, replay, skipUpTo),
  });

  const ready = (complete: () => Accepted | Refused): Ready => ({ ok: true, complete });

  if (frame.snapshot) {
    const faults = deps.faults ?? NO_FAULTS;
    const released =
      hub.sequencer.releasedThrough(sessionIds) ??
      (await reads.eventBefore([...sessionIds], hub.sequencer.unreleasedBound()));
    let point = await snapshotPoint({
      runtime,
      reads,
      recent: hub.recent,
      sessionId,
      sessionIds,
      released,
      faults,
    });
    let stored: StoredReplay | null = null;
    if (point !== null && point !== released) {
      // What is in progress follows the snapshot as events (snapshot-point.ts); a replay too long to
      // follow it leaves the point where it was, with the additive fields describing the rest.
      stored = await readStored(scope, point);
      if (replayAfter(scope, point, released, stored).tooLarge) {
        point = released;
        stored = null;
      }
    }
    const at = point;
    const snapshot = await buildSnapshot(runtime, reads, hub.recent, sessionId, at, faults);
    return ready(() => {
      const replay = stored === null || at === null ? [] : replayAfter(scope, at, released, stored).frames;
      return accepted('snapshot', snapshot, replay, at);
    });
  }
  if (frame.since === null && !subscriber.early) return ready(() => accepted('live', null, [], null));

  // A live subscribe on an `early` socket is a replay from where the socket was accepted.
  const explicit = frame.since !== null;
  const since = frame.since ?? subscriber.acceptedAfterId ?? '';
  const upTo = hub.sequencer.releasedThrough(sessionIds);
  const expired = explicit ? await cursorProblem(reads, sessionId, since, options.retentionDays) : null;
  if (expired !== null) return refuse('cursor_expired', expired, 'cursor_expired');
  const stored = await readStored(scope, since, true);
  return ready(() => {
    const { gap } = stored;
    if (gap !== null) {
      const problem = explicit
        ? gap
        : 'Streaming events since this connection opened are no longer kept in memory (it waited long ' +
          'before subscribing). Subscribe with snapshot: true.';
      return refuse('cursor_expired', problem, 'cursor_expired');
    }
    const replay = replayAfter(scope, since, upTo, stored);
    if (replay.tooLarge)
      return refuse(
        'replay_too_large',
        `Gap exceeds replay limit of ${options.replayCap} events. Reconnect with snapshot: true.`,
        'replay_too_large',
        replay.frames.length,
      );
    // The replay took in what was buffered since accept: the seam has nothing left to send.
    return accepted('replay', null, cursorReplay(replay.frames), since);
  });
}

/** The seam (§3.7): what arrived since accept, minus what the snapshot or the replay covered. */
function seamOf(scope: Scope, replay: readonly ReplayFrame[], skipUpTo: string | null): MetisEvent[] {
  const replayed = new Set(replay.map((frame) => frame.id));
  return scope.subscriber.buffer.filter(
    (event) =>
      (skipUpTo === null || event.id > skipUpTo) &&
      !replayed.has(event.id) &&
      scope.matches(event) &&
      carries(scope, event),
  );
}

/**
 * Whether this stream carries an event by whose session it is: its own, its workers' when the filter
 * asks for them, and its workers' questions to the user always (docs/decisions.md "Delegated
 * confirmations").
 */
function carries(scope: Scope, event: MetisEvent): boolean {
  return (
    event.session_id === scope.subscriber.sessionId ||
    scope.resolved.include_worker_sessions ||
    isQuestionToUser(event)
  );
}

/**
 * Why a replay from `since` would miss streaming events the filter asks for, or null: they were
 * dropped from memory (RecentStreams) or the archive, and this connection's own buffer does not hold
 * them either (it holds everything after `acceptedAfterId`).
 */
async function streamingGap(scope: Scope, since: string): Promise<string | null> {
  const { subscriber, resolved, sessionIds, deps } = scope;
  const bufferHasAll =
    !subscriber.early && (subscriber.acceptedAfterId === null || since >= subscriber.acceptedAfterId);
  if (bufferHasAll || !wantsStreaming(resolved) || !(await deps.hub.recent.droppedAfter(sessionIds, since))) {
    return null;
  }
  const window = deps.hub.recent.window;
  if (window === null)
    return 'Streaming events after this cursor are no longer kept in memory. Reconnect with snapshot: true.';
  const minutes = Math.round(window.minAgeMs / 60_000);
  return `Streaming events after this cursor are past the resume window (each session keeps those of the last ${minutes} minutes or its newest ${window.minEvents.toLocaleString('en-US')}, whichever is more). Reconnect with snapshot: true.`;
}

/**
 * The confirmation events of the session's workers after `since`, for a filter that leaves workers
 * out: they are the exception of the default view (docs/decisions.md "Delegated confirmations").
 */
async function workerQuestions(scope: Scope, since: string): Promise<ReplayResult<EventJsonRow>> {
  const { deps, resolved: filter } = scope;
  const types = ['tool.confirmation_requested', 'tool.confirmation_resolved'].filter(
    (type) => filter.event_types === null || filter.event_types.includes(type),
  );
  const workers = scope.descendants;
  if (filter.include_worker_sessions || types.length === 0 || workers.length === 0)
    return { rows: [], tooLarge: false };
  return deps.reads.replayJson({
    sessionIds: workers,
    afterId: since === '' ? null : since,
    eventTypes: types,
    actors: filter.actors,
    limit: deps.options.replayCap,
  });
}

/**
 * The stored and the streaming events after `since` this subscription gets, and, when `checkGap` (a
 * cursor's replay), whether streaming ones are missing.
 */
async function readStored(scope: Scope, since: string, checkGap = false): Promise<StoredReplay> {
  const { deps, resolved, sessionIds } = scope;
  const [own, questions, streams] = await Promise.all([
    deps.reads.replayJson({
      sessionIds: [...sessionIds],
      afterId: since === '' ? null : since,
      eventTypes: resolved.event_types,
      actors: resolved.actors,
      limit: deps.options.replayCap,
    }),
    workerQuestions(scope, since),
    readStreams(scope, since, checkGap),
  ]);
  return { own, questions, ...streams };
}

/**
 * The streaming events after `since`, then whether some are missing: in that order, so that a prune
 * of the archive that took rows from the first read has raised the horizon the second one sees.
 */
async function readStreams(
  scope: Scope,
  since: string,
  checkGap: boolean,
): Promise<{ streamed: MetisEvent[]; gap: string | null }> {
  const { deps, resolved, sessionIds } = scope;
  const streamed = wantsStreaming(resolved)
    ? await deps.hub.recent.after(sessionIds, since === '' ? null : since, deps.options.replayCap + 1)
    : [];
  return { streamed, gap: checkGap ? await streamingGap(scope, since) : null };
}

/**
 * The events after `since` this subscription gets, stored and streamed, in id order, as frames. Stored
 * rows newer than `upTo` (committed, not yet released: an older event is still waiting for its
 * commit) are left to arrive live, in order, after what was released before them.
 */
function replayAfter(
  scope: Scope,
  since: string,
  upTo: string | null,
  { own, questions, streamed }: StoredReplay,
): { frames: ReplayFrame[]; tooLarge: boolean } {
  const { deps, matches } = scope;
  const { hub, options } = deps;
  const shown = hub.sequencer.storedRowShown(upTo);
  const rows = mergeRows(own.rows, questions.rows).filter((row) => shown(row[0]));
  // What this connection was handed between accept and subscribe joins the in-memory streams: it
  // may hold deltas of messages RecentStreams no longer keeps, and they must go out in id order
  // inside the replay, not after it.
  // It also holds every streaming event released since the reads began, which `streamed` may lack.
  const buffered = scope.subscriber.buffer.filter((event) => event.id > since && carries(scope, event));
  const live = unionById(streamed, buffered).filter(matches);
  // Counted after the merge: a bus event buffered since accept is also a stored row, sent once.
  const frames = mergeReplay(rows, live);
  return {
    frames,
    // More streaming events than the cap were read (the archive stops there): the replay would be short.
    tooLarge:
      own.tooLarge ||
      questions.tooLarge ||
      frames.length > options.replayCap ||
      streamed.length > options.replayCap,
  };
}
