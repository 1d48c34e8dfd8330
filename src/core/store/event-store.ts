import type { MetisEvent } from '../events/envelope.js';
import type { ReplayQuery } from './trace-store.js';

/** A replay of stored events (streaming spec §3.6): the SQLite trace store's query, for every backend. */
export type EventQuery = ReplayQuery;

export interface EventPage {
  readonly events: readonly MetisEvent[];
  readonly tooLarge: boolean;
}

/**
 * The event log of a trace store, as every backend provides it (issue 19): group-committed appends that
 * resolve once durable, replays in id order, and the seeds a bus needs after a restart. SQLite answers
 * at once (its driver is synchronous; the promises are already settled); PostgreSQL over the network.
 * Both keep the same ids, per-session `seq`, payload bytes and timestamps, so a store copied from one
 * to the other replays and exports the same.
 */
export interface EventStore {
  readonly backend: 'sqlite' | 'postgres';
  /** Queues events for the next group commit; resolves once they are committed. Never drops one. */
  append(events: readonly MetisEvent[]): Promise<void>;
  replay(query: EventQuery): Promise<EventPage>;
  /** Highest `seq` stored for a session (0 when none): seeds the bus's counter after a restart. */
  lastSeq(sessionId: string): Promise<number>;
  /** Newest event id in the store: seeds the id generator so ids stay monotonic across restarts. */
  lastEventId(): Promise<string | null>;
  /** Sessions whose stored `seq` has a hole, with the first missing number (gap detection). */
  seqGaps(): Promise<
    readonly { readonly session_id: string; readonly after_seq: number; readonly next_seq: number }[]
  >;
  close(): Promise<void>;
}
