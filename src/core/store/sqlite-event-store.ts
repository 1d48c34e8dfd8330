import type { MetisEvent } from '../events/envelope.js';
import type { Db } from './database.js';
import { rowToEvent } from './event-rows.js';
import type { EventPage, EventQuery, EventStore } from './event-store.js';
import type { StoreWriter } from './store-writer.js';
import type { TraceStore } from './trace-store.js';

/**
 * The event log of a SQLite trace store behind the backend-neutral interface: appends go through the
 * trace writer's group commit (so they interleave correctly with what the bus writes), reads through
 * the trace store's prepared statements. Closing is the trace context's business, not this view's.
 */
export class SqliteEventStore implements EventStore {
  readonly backend = 'sqlite';

  constructor(
    private readonly parts: { readonly db: Db; readonly store: TraceStore; readonly writer: StoreWriter },
  ) {}

  async append(events: readonly MetisEvent[]): Promise<void> {
    if (events.length === 0) return;
    this.parts.writer.write(events);
    // Commits keep queue order: the last event committed means every one before it is.
    await this.parts.writer.whenCommitted(events.at(-1)!.id);
  }

  async replay(query: EventQuery): Promise<EventPage> {
    const { rows, tooLarge } = this.parts.store.replay(query);
    return { events: rows.map(rowToEvent), tooLarge };
  }

  async lastSeq(sessionId: string): Promise<number> {
    return this.parts.store.lastSeq(sessionId);
  }

  async lastEventId(): Promise<string | null> {
    return this.parts.store.lastEventId();
  }

  async seqGaps(): Promise<{ session_id: string; after_seq: number; next_seq: number }[]> {
    return this.parts.db
      .prepare(
        `SELECT session_id, seq AS after_seq, next_seq FROM (
           SELECT session_id, seq, lead(seq) OVER (PARTITION BY session_id ORDER BY id) AS next_seq FROM events
         )
         WHERE next_seq IS NOT NULL AND next_seq <> seq + 1
         ORDER BY session_id, after_seq`,
      )
      .all() as { session_id: string; after_seq: number; next_seq: number }[];
  }

  async close(): Promise<void> {}
}
