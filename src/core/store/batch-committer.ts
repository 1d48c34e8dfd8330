import type { MetisEvent } from '../events/envelope.js';
import type { Db } from './database.js';
import type { RowChange, RowOutcome } from './row-change.js';
import { rowApplierOf, type SqliteRowApplier } from './sqlite-row-applier.js';
import { storageFailureOf } from './storage-errors.js';

/** A row write of the session store, queued with the events so that it commits in order with them. */
export interface RowWrite {
  /** What the row is, for the log when it is refused. */
  readonly what: string;
  readonly change: RowChange;
  /**
   * Called once the row committed (true) or was refused by a non-transient error (false); `outcome` is
   * what the committed change found, for the kinds that report one (row-change.ts).
   */
  settled?(committed: boolean, outcome?: RowOutcome): void;
}

/** A commit's refused items (usually none), with their errors, and what the committed rows found. */
export interface CommitResult {
  readonly refused: Map<WriteItem, unknown>;
  readonly outcomes: Map<WriteItem, RowOutcome>;
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
  private readonly rows: SqliteRowApplier;
  /** What the rows of the transaction under way found; a transaction run again starts it afresh. */
  private outcomes = new Map<WriteItem, RowOutcome>();
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
    this.rows = rowApplierOf(db);
    this.commitAll = db.transaction((items: readonly WriteItem[]) => {
      this.outcomes = new Map();
      for (const item of items) this.apply(item);
    });
    // Nested inside commitIsolated, better-sqlite3 runs this one as a savepoint.
    const applyOne = db.transaction((item: WriteItem) => this.apply(item));
    this.commitIsolated = db.transaction((items: readonly WriteItem[]) => {
      this.outcomes = new Map();
      const refused = new Map<WriteItem, unknown>();
      for (const item of items) {
        try {
          applyOne(item);
        } catch (error) {
          if (storageFailureOf(error) !== null) throw error;
          refused.set(item, error);
          this.outcomes.delete(item);
        }
      }
      return refused;
    });
  }

  /**
   * Commits `items`; returns the ones refused for their own sake, and what the committed rows found.
   * @throws the storage error (SQLITE_BUSY, _FULL, _IOERR...) when storage refused the transaction
   */
  commit(items: readonly WriteItem[]): CommitResult {
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
    const outcomes = this.outcomes;
    this.outcomes = new Map();
    return { refused, outcomes };
  }

  private apply(item: WriteItem): void {
    if ('row' in item) {
      const outcome = this.rows.apply(item.row.change);
      if (outcome !== undefined) this.outcomes.set(item, outcome);
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
