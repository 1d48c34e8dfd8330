import type pg from 'pg';
import type { MetisEvent } from '../../events/envelope.js';
import { EVENT_COLUMNS, type EventRow, rowToEvent } from '../event-rows.js';
import {
  type ContentMessage,
  type ToolCallContentRow,
  type TraceContentReads,
  toContentToolCall,
} from '../trace-content-rows.js';
import { pgReplayJson } from './pg-stream-reads.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

const parse = (json: string | null): unknown => (json === null ? null : JSON.parse(json));

interface MessageContentRow {
  readonly id: string;
  readonly role: ContentMessage['role'];
  readonly content_json: string;
  readonly status: string;
}

const toContentMessage = (row: MessageContentRow): ContentMessage => ({
  id: row.id,
  role: row.role,
  status: row.status,
  content: parse(row.content_json) as ContentMessage['content'],
});

/**
 * The trace page's reads (trace-content-rows.ts) answered by the PostgreSQL store of record, for a
 * server with no SQLite working copy (docs/plans/store-port.md, steps 7-8). Each answer is
 * sqliteTraceContentReads' for the same rows.
 */
export function pgTraceContentReads(pool: pg.Pool): TraceContentReads {
  const rows = async <T>(text: string, values: unknown[]): Promise<T[]> =>
    (await pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows as T[];
  const events = async (text: string, values: unknown[]): Promise<MetisEvent[]> =>
    ((await pool.query({ text, values, rowMode: 'array', types: BIGINT_AS_NUMBER })).rows as EventRow[]).map(
      rowToEvent,
    );

  return {
    async replay(query) {
      // The frames the stream sends, parsed: the same envelope rowToEvent builds, one query.
      const { rows: frames, tooLarge } = await pgReplayJson(pool, query);
      return { events: frames.map(([, json]) => JSON.parse(json) as MetisEvent), tooLarge };
    },

    async turnRecords(sessionId, turnId) {
      const [turnEvents, messages, toolCalls] = await Promise.all([
        events(`SELECT ${EVENT_COLUMNS} FROM events WHERE turn_id = $1 AND session_id = $2 ORDER BY id`, [
          turnId,
          sessionId,
        ]),
        rows<MessageContentRow>(
          'SELECT id, role, content_json, status FROM messages WHERE session_id = $1 AND turn_id = $2 ORDER BY id',
          [sessionId, turnId],
        ),
        rows<ToolCallContentRow>(
          `SELECT id, tool_name, input_json, output_json, status, error_class FROM tool_calls
            WHERE session_id = $1 AND turn_id = $2 ORDER BY row_id`,
          [sessionId, turnId],
        ),
      ]);
      return {
        sessionId,
        turnId,
        events: turnEvents,
        messages: messages.map(toContentMessage),
        // A repeated tool_use_id keeps its newest row, as the SQLite adapter's map does.
        toolCalls: new Map(toolCalls.map((row) => [row.id, toContentToolCall(row)])),
      };
    },

    async messagesBefore(sessionId, ulid) {
      const [row] = await rows<{ count: number }>(
        'SELECT count(*) AS count FROM messages WHERE session_id = $1 AND id < $2',
        [sessionId, `msg_${ulid}`],
      );
      return row!.count;
    },

    async delegatingToolCall(workerSessionId) {
      const [row] = await rows<{ id: string }>(
        `SELECT called.id FROM sessions worker
           JOIN events started ON started.session_id = worker.parent_session_id AND started.type = 'delegate.started'
                              AND started.payload_json::json ->> 'worker_session_id' = worker.id
           JOIN events called ON called.session_id = worker.parent_session_id AND called.type = 'tool.called'
                             AND called.payload_json::json ->> 'tool_use_id' = started.payload_json::json ->> 'tool_use_id'
          WHERE worker.id = $1
          ORDER BY started.id, called.id LIMIT 1`,
        [workerSessionId],
      );
      return row?.id ?? null;
    },

    scoreEvents: (sessionId) =>
      events(
        `SELECT ${EVENT_COLUMNS} FROM events
          WHERE session_id = $1 AND (type = 'feedback.explicit' OR type = 'eval.completed') ORDER BY id`,
        [sessionId],
      ),
  };
}
