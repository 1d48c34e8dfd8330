import type pg from 'pg';
import { toSessionRecord } from '../family-state.js';
import type { SessionReads, StoredSessionSummary } from '../session-reads.js';
import { COST_EVENT_TYPES, type SessionRecord } from '../session-store.js';
import { costOfAmounts } from './pg-cost.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/** A session's row from PostgreSQL, with the same JavaScript types SQLite's answer has. */
export async function pgSessionRow(pool: pg.Pool, sessionId: string): Promise<SessionRecord | null> {
  const result = await pool.query({
    text: 'SELECT * FROM sessions WHERE id = $1',
    values: [sessionId],
    types: BIGINT_AS_NUMBER,
  });
  return (result.rows[0] as SessionRecord | undefined) ?? null;
}

/**
 * The row, turn state and cost in one statement, so all three are of one point of the store. Each
 * figure walks the session's (session_id, id) index: the newest turn edge backwards, the rest by type.
 */
const SUMMARY_SQL = `
  SELECT s.*,
         (SELECT count(*) FROM events WHERE session_id = s.id AND type = 'turn.started') AS metis_turn_count,
         (SELECT CASE WHEN e.type = 'turn.started' THEN e.turn_id END FROM events e
           WHERE e.session_id = s.id AND e.type IN ('turn.started', 'turn.completed', 'turn.cancelled')
           ORDER BY e.id DESC LIMIT 1) AS metis_current_turn_id,
         (SELECT coalesce(json_agg(json_build_object('type', type, 'amount',
                   CASE type WHEN 'llm.call_completed' THEN payload_json::json ->> 'cost_usd'
                             ELSE payload_json::json ->> 'worker_total_cost_usd' END) ORDER BY id), '[]')
            FROM events WHERE session_id = s.id AND type = ANY($2)) AS metis_costs
    FROM sessions s WHERE s.id = $1`;

interface SummaryRow extends SessionRecord {
  readonly metis_turn_count: number;
  readonly metis_current_turn_id: string | null;
  readonly metis_costs: { type: string; amount: string | null }[];
}

async function pgSessionSummary(pool: pg.Pool, sessionId: string): Promise<StoredSessionSummary | null> {
  const result = await pool.query<SummaryRow>({
    text: SUMMARY_SQL,
    values: [sessionId, COST_EVENT_TYPES],
    types: BIGINT_AS_NUMBER,
  });
  const row = result.rows[0];
  if (row === undefined) return null;
  return {
    row: toSessionRecord(row),
    turnCount: row.metis_turn_count,
    currentTurnId: row.metis_current_turn_id,
    storedCost: costOfAmounts(row.metis_costs),
  };
}

/** SessionReads over a PostgreSQL store (store-port.md step 7). */
export function pgSessionReads(pool: pg.Pool): SessionReads {
  return {
    session: (sessionId) => pgSessionRow(pool, sessionId),
    summary: (sessionId) => pgSessionSummary(pool, sessionId),
  };
}

/** The sessions not ended that have something queued, as SqliteQueueRows lists them: what a start takes up. */
export async function pgQueuedSessions(pool: pg.Pool): Promise<string[]> {
  const result = await pool.query<{ id: string }>(
    "SELECT id FROM sessions WHERE queue_json IS NOT NULL AND status = 'active' ORDER BY id",
  );
  return result.rows.map((row) => row.id);
}
