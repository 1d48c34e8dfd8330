import type { ConfirmationRequest } from '../confirmation-request.js';
import { SqliteBudgetRows } from './budget-rows.js';
import type { EventJsonRow } from './event-rows.js';
import { type CountedCost, type SessionAsOf, sessionAsOf, storedEventBefore } from './session-as-of.js';
import { MAX_DELEGATION_DEPTH } from './session-lineage.js';
import type { MessageRecord } from './session-store.js';
import type { SessionRows } from './store-port.js';
import { type StoredBudget, sqliteStoredBudget } from './stored-budget.js';
import type { PayloadRow } from './trace-lookups.js';
import type { ReplayQuery, ReplayResult, TraceStore } from './trace-store.js';

export type { ReplayQuery, ReplayResult } from './trace-store.js';

/** What a cursor's replay needs to know of the store's retention (stream/cursor.ts). */
export interface RetentionMarks {
  /** The cutoff of the newest prune in unix ms, or null when the store was never pruned. */
  readonly sweptCutoffMs: number | null;
  /** The oldest event still kept for the session, or null when it has none. */
  readonly oldestKept: { readonly id: string; readonly type: string } | null;
}

/**
 * What a subscription reads of the store to build its snapshot, replay and seam (streaming §3.4–§3.7).
 * Asynchronous, so that a store over the network can answer (docs/plans/store-port.md, step 3): every
 * answer is "as of" committed event ids, the same however late it is asked. The connection keeps
 * buffering what is released to it while these reads are under way, so the seam stays whole.
 */
export interface StreamReads {
  replayJson(query: ReplayQuery): Promise<ReplayResult<EventJsonRow>>;
  /** The newest stored event of these sessions before `beforeId`, or null. */
  eventBefore(sessionIds: readonly string[], beforeId: string): Promise<string | null>;
  /** Turn state and spend as the session's stored events up to `atId` show them. */
  sessionAsOf(sessionId: string, atId: string, counted: CountedCost): Promise<SessionAsOf>;
  /** The newest `limit` messages as a snapshot taken as of `atId` shows them. */
  messagesAsOf(sessionId: string, atId: string, limit: number): Promise<MessageRecord[]>;
  /**
   * The confirmation requests of these sessions no answer resolved and whose turn has not ended, as
   * stored now (what a node that does not run the session shows its clients waiting).
   */
  unansweredConfirmations(sessionIds: readonly string[]): Promise<ConfirmationRequest[]>;
  /** The confirmation requests and answers of these sessions up to `throughId`, in id order. */
  confirmationEventsThrough(sessionIds: readonly string[], throughId: string): Promise<PayloadRow[]>;
  retention(sessionId: string): Promise<RetentionMarks>;
  /** The session's budget as stored (caps and spend of it and its family); null when not stored. */
  storedBudget(sessionId: string): Promise<StoredBudget | null>;
  /**
   * The session and every session that descends from it (its workers, theirs: bus §6.8), each with its
   * parent: the session first, then level by level, each level by id. Empty for an unknown session.
   */
  lineage(sessionId: string): Promise<LineageRow[]>;
}

/** A session of a delegation tree and the session it was delegated from. */
export interface LineageRow {
  readonly id: string;
  readonly parent_session_id: string | null;
}

/**
 * The tree below a session, in one recursive query (PostgreSQL's placeholders; each appears once, in
 * order, so SQLite takes them as `?`; `$1` the session, `$2` the depth bound): a cycle in stored rows (corruption) stops at the bound, its repeats dropped by
 * `firstOfEach`.
 */
export const LINEAGE_SQL = `WITH RECURSIVE tree (id, parent_session_id, depth) AS (
    SELECT id, parent_session_id, 0 FROM sessions WHERE id = $1
    UNION ALL
    SELECT s.id, s.parent_session_id, t.depth + 1 FROM sessions s JOIN tree t ON s.parent_session_id = t.id
     WHERE t.depth < $2)
  SELECT id, parent_session_id FROM tree ORDER BY depth, id`;

/** `rows` with each session's first row only. */
export function firstOfEach(rows: readonly LineageRow[]): LineageRow[] {
  const seen = new Set<string>();
  return rows.filter((row) => !seen.has(row.id) && seen.add(row.id) !== undefined);
}

/**
 * The stream's reads over the SQLite store: each answer computed at the call and handed back as an
 * already-resolved promise, so an `await` on it resumes before any other I/O callback runs.
 */
export function sqliteStreamReads(store: TraceStore, sessions: SessionRows): StreamReads {
  const { db } = store;
  // Prepared at the first budget read: most subscriptions never ask (only of a session run elsewhere).
  let budgets: SqliteBudgetRows | null = null;
  return {
    storedBudget: async (sessionId) => {
      budgets ??= new SqliteBudgetRows(db);
      return sqliteStoredBudget(sessions, budgets, sessionId);
    },
    replayJson: async (query) => store.replayJson(query),
    eventBefore: async (sessionIds, beforeId) => storedEventBefore(db, sessionIds, beforeId),
    sessionAsOf: async (sessionId, atId, counted) => sessionAsOf(db, sessionId, atId, counted),
    messagesAsOf: async (sessionId, atId, limit) => sessions.messagesAsOf(sessionId, atId, limit),
    unansweredConfirmations: async (sessionIds) => sessions.unansweredConfirmations(sessionIds),
    confirmationEventsThrough: async (sessionIds, throughId) =>
      store.lookups.confirmationEventsThrough(sessionIds, throughId),
    lineage: async (sessionId) =>
      firstOfEach(
        db.prepare(LINEAGE_SQL.replace(/\$\d/g, '?')).all(sessionId, MAX_DELEGATION_DEPTH) as LineageRow[],
      ),
    retention: async (sessionId) => ({
      sweptCutoffMs: store.lastSweepCutoffMs(),
      oldestKept: store.getOldestKept(sessionId),
    }),
  };
}
