import type { MetisEvent } from '../events/envelope.js';
import type { Db } from './database.js';
import { storageFailureOf } from './storage-errors.js';

/** A row write of the session store, queued with the events so that it commits in order with them. */
export interface RowWrite {
  /** What the row is, for the log when it is refused. */
  readonly what: string;
  run(): void;
  /** Called once the row committed (true) or was refused by a non-transient error (false). */
  settled?(committed: boolean): void;
}

/** One entry of the trace writer's queue: an event (with its row parameters) or a session-store row. */
export type WriteItem =
  | { readonly event: MetisEvent; readonly params: unknown[]; readonly bytes: number }
  | { readonly row: RowWrite; readonly bytes: number };

/**
 * Writes items in one `BEGIN IMMEDIATE` transaction (group commit). When a non-transient error (a
 * constraint, a trigger) fails it, the transaction is run again with a savepoint per item, so only the
 * refused items are left out. A transient storage failure (busy, full, I/O) is thrown to the caller,
 * which retries the same items later.
 */
export class BatchCommitter {
  private readonly knownSessions = new Set<string>();
  private readonly insertEvent;
  private readonly insertSession;
  private readonly commitAll;
  private readonly commitIsolated;

  constructor(db: Db) {
    this.insertEvent = db.prepare(
      `INSERT OR IGNORE INTO events
         (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertSession = db.prepare(
      'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)',
    );
    this.commitAll = db.transaction((items: readonly WriteItem[]) => {
      for (const item of items) this.apply(item);
    });
    // Nested inside commitIsolated, better-sqlite3 runs this one as a savepoint.
    const applyOne = db.transaction((item: WriteItem) => this.apply(item));
    this.commitIsolated = db.transaction((items: readonly WriteItem[]) => {
      const refused = new Map<WriteItem, unknown>();
      for (const item of items) {
        try {
          applyOne(item);
        } catch (error) {
          if (storageFailureOf(error) !== null) throw error;
          refused.set(item, error);
        }
      }
      return refused;
    });
  }

  /**
   * Commits `items`; returns the ones refused for their own sake (usually none), with their errors.
   * @throws the storage error (SQLITE_BUSY, _FULL, _IOERR...) when storage refused the transaction
   */
  commit(items: readonly WriteItem[]): Map<WriteItem, unknown> {
    let refused: Map<WriteItem, unknown>;
    try {
      this.commitAll.immediate(items);
      refused = new Map();
    } catch (error) {
      if (storageFailureOf(error) !== null) throw error;
      refused = this.commitIsolated.immediate(items);
    }
    for (const item of items) {
      if ('event' in item && !refused.has(item)) this.knownSessions.add(item.event.session_id);
    }
    return refused;
  }

  private apply(item: WriteItem): void {
    if ('row' in item) {
      item.row.run();
      return;
    }
    const sessionId = item.event.session_id;
    if (!this.knownSessions.has(sessionId)) {
      const now = Date.now() * 1000;
      this.insertSession.run(sessionId, now, now);
    }
    this.insertEvent.run(item.params);
  }
}
