import type pg from 'pg';
import { RECENT_MESSAGES } from '../family-state.js';
import type { OpenToolCalls, OpenTurn, OpenWork, TurnEventRow } from '../open-work.js';
import {
  COST_EVENT_TYPES,
  type MessageRecord,
  type MessageRow,
  type SessionRecord,
  type ToolCallRecord,
  type ToolCallRow,
  toMessage,
  toToolCallRecord,
} from '../session-records.js';
import { costOfAmounts } from './pg-cost.js';
import { pgSessionRow } from './pg-session-reads.js';
import { pgArchivedAfter } from './pg-stream-archive-rows.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/**
 * The open work of a PostgreSQL store (open-work.ts), for recovery and take-over on a server with no
 * SQLite working copy (docs/plans/store-port.md, steps 7-8). Each answer is SqliteOpenWork's for the
 * same rows, with the same JavaScript types (bigint columns as numbers).
 */
export class PgOpenWork implements OpenWork {
  constructor(
    private readonly pool: pg.Pool,
    /**
     * Only these sessions' open turns and tool-call rows (a family taken over: its root and every
     * worker below it), read by the events' and rows' session keys; null: the whole store (a start).
     */
    private readonly only: readonly string[] | null = null,
  ) {}

  private async rows<T>(text: string, values: unknown[] = []): Promise<T[]> {
    return (await this.pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows as T[];
  }

  openTurns(): Promise<OpenTurn[]> {
    return this.rows<OpenTurn>(
      `SELECT s.session_id, s.turn_id, s.id, se.parent_session_id FROM events s
         JOIN sessions se ON se.id = s.session_id
        WHERE s.type = 'turn.started' AND s.turn_id IS NOT NULL AND ($1::text[] IS NULL OR s.session_id = ANY($1))
          AND NOT EXISTS (SELECT 1 FROM events e
                           WHERE e.turn_id = s.turn_id AND e.type IN ('turn.completed', 'turn.cancelled'))
        ORDER BY s.id`,
      [this.only],
    );
  }

  turnEvents(turnId: string): Promise<TurnEventRow[]> {
    return this.rows<TurnEventRow>(
      'SELECT id, type, parent_event_id, timestamp_us, payload_json FROM events WHERE turn_id = $1 ORDER BY id',
      [turnId],
    );
  }

  async resumedSince(sessionId: string, afterId: string): Promise<number> {
    const [row] = await this.rows<{ count: number }>(
      "SELECT count(*) AS count FROM events WHERE session_id = $1 AND type = 'session.resumed' AND id > $2",
      [sessionId, afterId],
    );
    return row!.count;
  }

  sessionsWithOpenToolCalls(): Promise<OpenToolCalls[]> {
    return this.rows(
      `SELECT t.session_id, s.parent_session_id, count(*) AS open_calls
         FROM tool_calls t LEFT JOIN sessions s ON s.id = t.session_id
        WHERE t.status IN ('pending', 'running') AND ($1::text[] IS NULL OR t.session_id = ANY($1))
        GROUP BY t.session_id, s.parent_session_id ORDER BY t.session_id`,
      [this.only],
    );
  }

  session(sessionId: string): Promise<SessionRecord | null> {
    return pgSessionRow(this.pool, sessionId);
  }

  async storedCost(sessionId: string): Promise<number> {
    const rows = await this.rows<{ type: string; amount: string | null }>(
      `SELECT type, CASE type WHEN 'llm.call_completed' THEN payload_json::json ->> 'cost_usd'
                              ELSE payload_json::json ->> 'worker_total_cost_usd' END AS amount
         FROM events WHERE session_id = $1 AND type = ANY($2) ORDER BY id`,
      [sessionId, COST_EVENT_TYPES],
    );
    return costOfAmounts(rows);
  }

  async lastSeq(sessionId: string): Promise<number> {
    const [row] = await this.rows<{ seq: number }>(
      'SELECT coalesce(max(seq), 0) AS seq FROM events WHERE session_id = $1',
      [sessionId],
    );
    return row!.seq;
  }

  async turnCount(sessionId: string): Promise<number> {
    const [row] = await this.rows<{ count: number }>(
      "SELECT count(*) AS count FROM events WHERE session_id = $1 AND type = 'turn.started'",
      [sessionId],
    );
    return row!.count;
  }

  async turnMessages(sessionId: string, turnId: string): Promise<MessageRecord[]> {
    const rows = await this.rows<MessageRow>(
      `SELECT * FROM (SELECT * FROM messages WHERE session_id = $1 ORDER BY id DESC LIMIT $3) recent
        WHERE turn_id = $2 ORDER BY id`,
      [sessionId, turnId, RECENT_MESSAGES],
    );
    return rows.map(toMessage);
  }

  async toolCall(toolUseId: string, sessionId: string): Promise<ToolCallRecord | null> {
    const [row] = await this.rows<ToolCallRow>(
      'SELECT * FROM tool_calls WHERE id = $1 AND session_id = $2 ORDER BY row_id DESC LIMIT 1',
      [toolUseId, sessionId],
    );
    return row === undefined ? null : toToolCallRecord(row);
  }

  archivedAfter(sessionId: string, afterId: string, limit: number): Promise<string[]> {
    return pgArchivedAfter(this.pool, sessionId, afterId, limit);
  }
}
