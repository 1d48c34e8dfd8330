import { type BudgetRows, SqliteBudgetRows } from './budget-rows.js';
import { type ConversationReads, sqliteConversationReads } from './conversation-reads.js';
import type { Db } from './database.js';
import type { FamilyLoader } from './family-state.js';
import { type PatternRows, SqlitePatternRows } from './pattern-rows.js';
import { type QueueRows, SqliteQueueRows } from './queue-rows.js';
import { type SessionReads, sqliteSessionReads } from './session-reads.js';
import { SessionStore } from './session-store.js';
import { SqliteFamilyLoader } from './sqlite-load-family.js';
import { SqliteTraceLookups, type TraceLookups } from './trace-lookups.js';
import { writerOf } from './trace-writer.js';

/** The sessions, messages and tool calls of the store, as the runtime reads and writes them. */
export type SessionRows = Omit<SessionStore, keyof import('./unsettled-messages.js').UnsettledMessages>;

/**
 * What the runtime needs of a store (issue 35): no SQL and no driver above this line. Events reach the
 * store through the bus and the trace writer; everything else the runtime reads or changes goes through
 * these parts. The SQLite adapter answers reads synchronously; a backend over the network will serve the
 * runtime's synchronous reads from the owner's memory of its live sessions.
 */
export interface StorePort {
  readonly sessions: SessionRows;
  /** Any session's row, asynchronously: what the runtime asks of a session it does not hold. */
  readonly sessionReads: SessionReads;
  /** The stored conversation of any session, for the routes that page through it. */
  readonly conversations: ConversationReads;
  readonly lookups: TraceLookups;
  readonly patterns: PatternRows;
  /** What each session's budget is and what it spent: what pauses a turn, after a restart too. */
  readonly budgets: BudgetRows;
  /** Messages sent while a turn ran, waiting: served after a restart or a take-over too. */
  readonly queues: QueueRows;
  /** Loads a session and its workers as their owner runs them (runtime.open). */
  readonly families: FamilyLoader;
  /**
   * Resolves true once every write queued so far is stored, so that a load made after it sees this
   * process's own writes; false after `timeoutMs`, or at once while storage is away.
   */
  settled(timeoutMs: number): Promise<boolean>;
  /**
   * Resolves once an event the bus took is stored (at once when the store commits before `emit` returns:
   * no writer attached); rejects with the storage error after `timeoutMs` when one is given.
   */
  whenStored(eventId: string, timeoutMs?: number): Promise<void>;
}

/** The store port over a SQLite file, with its trace writer when one is attached to the connection. */
export function sqliteStorePort(db: Db, lookups: TraceLookups = new SqliteTraceLookups(db)): StorePort {
  const sessions = new SessionStore(db);
  return {
    sessions,
    sessionReads: sqliteSessionReads(sessions),
    conversations: sqliteConversationReads(sessions),
    lookups,
    patterns: new SqlitePatternRows(db),
    budgets: new SqliteBudgetRows(db),
    queues: new SqliteQueueRows(db),
    families: new SqliteFamilyLoader(db),
    // The writer commits at once unless it waits storage out: then a load is not held up for it.
    settled: (timeoutMs) => {
      const writer = writerOf(db);
      if (writer === undefined) return Promise.resolve(true);
      return writer.failure === null ? writer.idle(timeoutMs) : Promise.resolve(false);
    },
    // Looked up at each call: a writer may be attached after the port is made.
    whenStored: (id, timeoutMs) => writerOf(db)?.whenCommitted(id, timeoutMs) ?? Promise.resolve(),
  };
}
