import type { MetisEvent } from '../events/envelope.js';
import { newEventId } from '../events/ids.js';
import type { StreamArchive, StreamWindow } from './stream-archive.js';

interface SessionStreams {
  events: MetisEvent[];
  /** Message ids whose `message.complete` was seen, oldest first. */
  finished: string[];
  /** Id of the newest streaming event dropped from memory, if any: a replay from before it is short. */
  droppedUpTo: string | null;
}

/**
 * The streaming events a replay needs (DESIGN.md invariant 6). In memory: every message still
 * streaming plus the last few finished ones per session, enough for a snapshot and most reconnects.
 * Behind it, when given, the archive (stream-archive.ts): the session's whole resume window, in the
 * database, surviving a restart; a replay from further back than memory reaches reads it.
 */
export class RecentStreams {
  private readonly sessions = new Map<string, SessionStreams>();
  /** An id minted at construction: every event with a greater id was created by this process. */
  private readonly bornAfter = newEventId();

  constructor(
    private readonly archive: StreamArchive | null = null,
    private readonly keepFinished = 4,
  ) {}

  add(event: MetisEvent): void {
    this.archive?.record(event);
    let streams = this.sessions.get(event.session_id);
    if (streams === undefined) {
      streams = { events: [], finished: [], droppedUpTo: null };
      this.sessions.set(event.session_id, streams);
    }
    streams.events.push(event);
    if (event.type === 'message.complete') {
      streams.finished.push(String(event.payload.message_id));
      if (streams.finished.length > this.keepFinished) {
        const evicted = streams.finished.shift()!;
        const kept: MetisEvent[] = [];
        for (const e of streams.events) {
          if (e.payload.message_id !== evicted) kept.push(e);
          else if (streams.droppedUpTo === null || e.id > streams.droppedUpTo) streams.droppedUpTo = e.id;
        }
        streams.events = kept;
      }
    }
  }

  /**
   * Whether streaming events of these sessions with an id greater than `afterId` were dropped from
   * memory, or from the archive when there is one: a replay from that cursor would miss them, so it
   * must not be offered (cursor_expired). Ask it after `after`, whose answer it vouches for.
   */
  async droppedAfter(sessionIds: ReadonlySet<string>, afterId: string): Promise<boolean> {
    const archive = this.archive;
    if (archive !== null) {
      const missing = await Promise.all([...sessionIds].map((id) => archive.missingAfter(id, afterId)));
      return missing.includes(true);
    }
    for (const sessionId of sessionIds) {
      const dropped = this.sessions.get(sessionId)?.droppedUpTo ?? null;
      if (dropped !== null && dropped > afterId) return true;
    }
    return false;
  }

  /**
   * Kept streaming events of these sessions with an id greater than `afterId`, in id order: from
   * memory when it reaches back that far, else from the archive (at most `limit` per session). Holds
   * every one added before the call; those added while the archive reads go to the connections.
   */
  async after(
    sessionIds: ReadonlySet<string>,
    afterId: string | null,
    limit?: number,
  ): Promise<MetisEvent[]> {
    if (this.archive !== null && !this.memoryReaches(sessionIds, afterId))
      return this.archive.after(sessionIds, afterId, limit);
    return this.inMemoryAfter(sessionIds, afterId);
  }

  /** The streaming events of these sessions in memory with an id greater than `afterId`, in id order. */
  inMemoryAfter(sessionIds: ReadonlySet<string>, afterId: string | null): MetisEvent[] {
    const out: MetisEvent[] = [];
    for (const sessionId of sessionIds) {
      const streams = this.sessions.get(sessionId);
      if (!streams) continue;
      for (const event of streams.events) if (afterId === null || event.id > afterId) out.push(event);
    }
    return out.sort((a, b) => (a.id < b.id ? -1 : 1));
  }

  /**
   * Whether memory holds every streaming event of these sessions after `afterId`: the cursor is from
   * this process's lifetime (memory saw every event created since), and nothing after it was evicted.
   */
  private memoryReaches(sessionIds: ReadonlySet<string>, afterId: string | null): boolean {
    if (afterId === null || afterId < this.bornAfter) return false;
    for (const sessionId of sessionIds) {
      const dropped = this.sessions.get(sessionId)?.droppedUpTo ?? null;
      if (dropped !== null && dropped > afterId) return false;
    }
    return true;
  }

  /** How far back a replay can reach past memory (the archive's resume window), or null: memory only. */
  get window(): StreamWindow | null {
    return this.archive?.window ?? null;
  }

  /** The server is stopping: what the archive holds in memory goes to the writer now. */
  close(): void {
    this.archive?.close();
  }

  /** Streaming events of a message that has started and not completed, if any. */
  inFlight(sessionId: string): MetisEvent[] {
    const streams = this.sessions.get(sessionId);
    if (!streams) return [];
    const finished = new Set(streams.finished);
    return streams.events.filter((e) => !finished.has(String(e.payload.message_id)));
  }
}
