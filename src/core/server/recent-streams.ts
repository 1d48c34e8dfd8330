import type { MetisEvent } from '../events/envelope.js';

interface SessionStreams {
  events: MetisEvent[];
  /** Message ids whose `message.complete` was seen, oldest first. */
  finished: string[];
  /** Id of the newest streaming event dropped from memory, if any: a replay from before it is short. */
  droppedUpTo: string | null;
}

/**
 * Streaming events are never persisted, so the server keeps those of in-flight and recently finished
 * messages in memory: a client that reconnects mid-message gets the deltas it missed too (DESIGN.md
 * invariant 6). Per session it keeps every message still streaming plus the last few finished ones.
 */
export class RecentStreams {
  private readonly sessions = new Map<string, SessionStreams>();

  constructor(private readonly keepFinished = 4) {}

  add(event: MetisEvent): void {
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
   * memory: a replay from that cursor would miss them, so it must not be offered (cursor_expired).
   */
  droppedAfter(sessionIds: ReadonlySet<string>, afterId: string): boolean {
    for (const sessionId of sessionIds) {
      const dropped = this.sessions.get(sessionId)?.droppedUpTo ?? null;
      if (dropped !== null && dropped > afterId) return true;
    }
    return false;
  }

  /** Kept streaming events of these sessions with an id greater than `afterId`, in id order. */
  after(sessionIds: ReadonlySet<string>, afterId: string | null): MetisEvent[] {
    const out: MetisEvent[] = [];
    for (const sessionId of sessionIds) {
      const streams = this.sessions.get(sessionId);
      if (!streams) continue;
      for (const event of streams.events) if (afterId === null || event.id > afterId) out.push(event);
    }
    return out.sort((a, b) => (a.id < b.id ? -1 : 1));
  }

  /** Streaming events of a message that has started and not completed, if any. */
  inFlight(sessionId: string): MetisEvent[] {
    const streams = this.sessions.get(sessionId);
    if (!streams) return [];
    const finished = new Set(streams.finished);
    return streams.events.filter((e) => !finished.has(String(e.payload.message_id)));
  }
}
