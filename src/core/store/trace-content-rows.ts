import type { MetisEvent } from '../events/envelope.js';
import type { Db } from './database.js';
import { EVENT_COLUMNS, type EventRow, rowToEvent } from './event-rows.js';
import type { ReplayQuery, TraceStore } from './trace-store.js';

/** A stored message, as the trace's content needs it. */
export interface ContentMessage {
  readonly id: string;
  readonly role: 'user' | 'assistant' | 'tool';
  readonly content: readonly { readonly type: string; readonly [key: string]: unknown }[];
  readonly status: string;
}

/** A stored tool call (the `tool_calls` row), keyed by its tool_use_id. */
export interface ContentToolCall {
  readonly id: string;
  readonly tool_name: string;
  readonly input: unknown;
  readonly output: unknown;
  readonly status: string;
  readonly error_class: string | null;
}

/** What one turn's span tree shows: its events, messages and tool calls. */
export interface TurnRecords {
  readonly sessionId: string;
  readonly turnId: string;
  readonly events: readonly MetisEvent[];
  readonly messages: readonly ContentMessage[];
  readonly toolCalls: ReadonlyMap<string, ContentToolCall>;
}

const parse = (json: string | null): unknown => (json === null ? null : JSON.parse(json));

/**
 * A turn's events (by `idx_events_turn`), messages and tool calls, in id order: the trace's content is
 * read by turn, so a span whose end is on a later page of events is still complete.
 */
export function turnRecords(db: Db, sessionId: string, turnId: string): TurnRecords {
  const events = (
    db
      .prepare(`SELECT ${EVENT_COLUMNS} FROM events WHERE turn_id = ? AND session_id = ? ORDER BY id`)
      .raw()
      .all(turnId, sessionId) as EventRow[]
  ).map(rowToEvent);
  const messages = (
    db
      .prepare(
        'SELECT id, role, content_json, status FROM messages WHERE session_id = ? AND turn_id = ? ORDER BY id',
      )
      .all(sessionId, turnId) as {
      id: string;
      role: ContentMessage['role'];
      content_json: string;
      status: string;
    }[]
  ).map((row) => ({
    id: row.id,
    role: row.role,
    status: row.status,
    content: parse(row.content_json) as ContentMessage['content'],
  }));
  const toolCalls = new Map<string, ContentToolCall>();
  const rows = db
    .prepare(
      `SELECT id, tool_name, input_json, output_json, status, error_class FROM tool_calls
        WHERE session_id = ? AND turn_id = ? ORDER BY row_id`,
    )
    .all(sessionId, turnId) as ToolCallContentRow[];
  for (const row of rows) toolCalls.set(row.id, toContentToolCall(row));
  return { sessionId, turnId, events, messages, toolCalls };
}

/** How many messages of the session were stored before `beforeId` (a message or an event id's ULID). */
export function messagesBefore(db: Db, sessionId: string, ulid: string): number {
  return db
    .prepare('SELECT count(*) FROM messages WHERE session_id = ? AND id < ?')
    .pluck()
    .get(sessionId, `msg_${ulid}`) as number;
}

/**
 * The delegate tool call that started a worker session: its planner's `tool.called` event id, found
 * through `delegate.started` in the planner's session; null for a session that is not a worker.
 */
export function delegatingToolCall(db: Db, workerSessionId: string): string | null {
  const parent = db
    .prepare('SELECT parent_session_id FROM sessions WHERE id = ?')
    .pluck()
    .get(workerSessionId) as string | null | undefined;
  if (!parent) return null;
  const toolUseId = db
    .prepare(
      `SELECT json_extract(payload_json, '$.tool_use_id') FROM events
        WHERE session_id = ? AND type = 'delegate.started' AND json_extract(payload_json, '$.worker_session_id') = ?
        LIMIT 1`,
    )
    .pluck()
    .get(parent, workerSessionId) as string | undefined;
  if (toolUseId === undefined) return null;
  return (
    (db
      .prepare(
        `SELECT id FROM events WHERE session_id = ? AND type = 'tool.called'
          AND json_extract(payload_json, '$.tool_use_id') = ? LIMIT 1`,
      )
      .pluck()
      .get(parent, toolUseId) as string | undefined) ?? null
  );
}

/** The session's feedback and eval verdicts, oldest first. */
export function scoreEvents(db: Db, sessionId: string): MetisEvent[] {
  return (
    db
      .prepare(
        `SELECT ${EVENT_COLUMNS} FROM events
          WHERE session_id = ? AND (type = 'feedback.explicit' OR type = 'eval.completed') ORDER BY id`,
      )
      .raw()
      .all(sessionId) as EventRow[]
  ).map(rowToEvent);
}

/** The newest `limit` messages of a session stored before `beforeUlid` (an event id's ULID), oldest first. */
export function messagesUpTo(db: Db, sessionId: string, beforeUlid: string, limit: number): ContentMessage[] {
  return (
    db
      .prepare(
        `SELECT id, role, content_json, status FROM messages WHERE session_id = ? AND id < ?
          ORDER BY id DESC LIMIT ?`,
      )
      .all(sessionId, `msg_${beforeUlid}`, limit) as {
      id: string;
      role: ContentMessage['role'];
      content_json: string;
      status: string;
    }[]
  )
    .reverse()
    .map((row) => ({
      id: row.id,
      role: row.role,
      status: row.status,
      content: parse(row.content_json) as ContentMessage['content'],
    }));
}

/** A session's stored tool call by its tool_use_id (the newest, should an id repeat across turns). */
export function toolCallRow(db: Db, sessionId: string, toolUseId: string): ContentToolCall | null {
  const row = db
    .prepare(
      `SELECT id, tool_name, input_json, output_json, status, error_class FROM tool_calls
        WHERE session_id = ? AND id = ? ORDER BY row_id DESC LIMIT 1`,
    )
    .get(sessionId, toolUseId) as ToolCallContentRow | undefined;
  return row === undefined ? null : toContentToolCall(row);
}

/** A tool_calls row as both stores' trace reads select it. */
export interface ToolCallContentRow {
  readonly id: string;
  readonly tool_name: string;
  readonly input_json: string;
  readonly output_json: string | null;
  readonly status: string;
  readonly error_class: string | null;
}

export const toContentToolCall = (row: ToolCallContentRow): ContentToolCall => ({
  id: row.id,
  tool_name: row.tool_name,
  input: parse(row.input_json),
  output: parse(row.output_json),
  status: row.status,
  error_class: row.error_class,
});

/**
 * What a session's trace page shows besides its events (the dashboard's content and scores), read per
 * turn. Asynchronous, so that a store over the network can answer (docs/plans/store-port.md step 3).
 */
export interface TraceContentReads {
  /** A page of the session's stored events (streaming §3.6's replay), as events. */
  replay(query: ReplayQuery): Promise<{ readonly events: readonly MetisEvent[]; readonly tooLarge: boolean }>;
  turnRecords(sessionId: string, turnId: string): Promise<TurnRecords>;
  messagesBefore(sessionId: string, ulid: string): Promise<number>;
  delegatingToolCall(workerSessionId: string): Promise<string | null>;
  scoreEvents(sessionId: string): Promise<MetisEvent[]>;
}

/** The trace page's reads over a SQLite store, answered at the call. */
export function sqliteTraceContentReads(store: TraceStore): TraceContentReads {
  const { db } = store;
  return {
    replay: async (query) => {
      const { rows, tooLarge } = store.replay(query);
      return { events: rows.map(rowToEvent), tooLarge };
    },
    turnRecords: async (sessionId, turnId) => turnRecords(db, sessionId, turnId),
    messagesBefore: async (sessionId, ulid) => messagesBefore(db, sessionId, ulid),
    delegatingToolCall: async (workerSessionId) => delegatingToolCall(db, workerSessionId),
    scoreEvents: async (sessionId) => scoreEvents(db, sessionId),
  };
}
