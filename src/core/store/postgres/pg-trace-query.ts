import type pg from 'pg';
import type { MetisEvent } from '../../events/envelope.js';
import { EVENT_COLUMNS, type EventRow, rowToEvent } from '../event-rows.js';
import { type ContentMessage, type ToolCallContentRow, toContentToolCall } from '../trace-content-rows.js';
import { type TraceQueryReads, ulidOfEventId } from '../trace-query-reads.js';
import { pgReplayJson } from './pg-stream-reads.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/** A chain longer than this is a loop in bad data, not a real causal chain (the SQLite query's bound). */
const MAX_CHAIN_DEPTH = 10_000;

/**
 * The walk up `parent_event_id`, one `idx_events_id` probe per link. The seed is cast to the column's
 * collation: a recursive query's column must have one collation in both of its terms.
 */
export const CAUSAL_CHAIN_SQL = `WITH RECURSIVE chain(id, depth) AS (
    SELECT $1::text COLLATE "C", 0
    UNION ALL
    SELECT e.parent_event_id, chain.depth + 1 FROM events e JOIN chain ON e.id = chain.id
     WHERE e.parent_event_id IS NOT NULL AND chain.depth < ${MAX_CHAIN_DEPTH}
  )
  SELECT ${EVENT_COLUMNS} FROM chain JOIN events USING (id) ORDER BY chain.depth`;

interface MessageContentRow {
  readonly id: string;
  readonly role: ContentMessage['role'];
  readonly content_json: string;
  readonly status: string;
}

/**
 * A plugin's trace reads (`TraceQuery.async`) answered by the PostgreSQL store of record, for a server
 * with no working copy. Each read runs on an index: the primary key (session_id, id) for a session's
 * events, `idx_events_id` for an event and each link of a chain, `idx_messages_session` and
 * `idx_tool_calls_session` for content. Each answer is sqliteTraceQueryReads' for the same rows.
 */
export function pgTraceQueryReads(pool: pg.Pool): TraceQueryReads {
  const events = async (text: string, values: unknown[]): Promise<MetisEvent[]> =>
    ((await pool.query({ text, values, rowMode: 'array', types: BIGINT_AS_NUMBER })).rows as EventRow[]).map(
      rowToEvent,
    );
  const rows = async <T>(text: string, values: unknown[]): Promise<T[]> =>
    (await pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows as T[];

  return {
    async replay(query) {
      const { rows: frames, tooLarge } = await pgReplayJson(pool, query);
      return { events: frames.map(([, json]) => JSON.parse(json) as MetisEvent), tooLarge };
    },

    sessionEvents: (sessionId) =>
      events(`SELECT ${EVENT_COLUMNS} FROM events WHERE session_id = $1 ORDER BY id`, [sessionId]),

    async getEvent(id) {
      const [event] = await events(`SELECT ${EVENT_COLUMNS} FROM events WHERE id = $1`, [id]);
      return event ?? null;
    },

    causalChain: (eventId) => events(CAUSAL_CHAIN_SQL, [eventId]),

    async messagesBefore(sessionId, eventId, limit) {
      const found = await rows<MessageContentRow>(
        `SELECT id, role, content_json, status FROM messages WHERE session_id = $1 AND id < $2
          ORDER BY id DESC LIMIT $3`,
        [sessionId, `msg_${ulidOfEventId(eventId)}`, limit],
      );
      return found.reverse().map((row) => ({
        id: row.id,
        role: row.role,
        status: row.status,
        content: JSON.parse(row.content_json) as ContentMessage['content'],
      }));
    },

    async toolCall(sessionId, toolUseId) {
      const [row] = await rows<ToolCallContentRow>(
        `SELECT id, tool_name, input_json, output_json, status, error_class FROM tool_calls
          WHERE session_id = $1 AND id = $2 ORDER BY row_id DESC LIMIT 1`,
        [sessionId, toolUseId],
      );
      return row === undefined ? null : toContentToolCall(row);
    },
  };
}
