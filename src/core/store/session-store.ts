import type { ConfirmationRequest } from '../confirmation-request.js';
import { nowMicros } from '../events/clock.js';
import type { Db } from './database.js';
import { MessageMarks } from './message-marks.js';
import type { RowChange } from './row-change.js';
import { nextRowId } from './row-ids.js';
import { type RowWrite, writeRow } from './trace-writer.js';

export type MessageRole = 'user' | 'assistant' | 'tool';
export type MessageStatus = 'complete' | 'cancelled' | 'error';
export type ToolCallStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/**
 * The events that carry a session's spend: its own model calls (`cost_usd`) and its workers' totals
 * (`worker_total_cost_usd`), on success and on failure (a failed worker spent too, bus §6.8).
 */
export const COST_EVENT_TYPES = ['llm.call_completed', 'delegate.completed', 'delegate.failed'] as const;

export interface SessionRecord {
  readonly id: string;
  readonly parent_session_id: string | null;
  readonly workspace_path: string | null;
  readonly workspace_hash: string | null;
  readonly active_model: string | null;
  /** The model the user pinned (the `manual_sticky` routing policy), if any. */
  readonly sticky_model: string | null;
  readonly status: 'active' | 'ended';
  readonly disposition: string | null;
  readonly created_at_us: number;
  readonly updated_at_us: number;
}

/** A canonical message (DESIGN.md "Sessions, messages, tool calls"); `content` is a ContentBlock list. */
export interface MessageRecord {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly role: MessageRole;
  readonly content: unknown[];
  readonly status: MessageStatus;
  readonly model: string | null;
  readonly usage: Record<string, unknown> | null;
  readonly created_at_us: number;
}

export interface ToolCallRecord {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
  readonly tool_name: string;
  readonly input: unknown;
  readonly status: ToolCallStatus;
  readonly output: unknown;
  readonly error_class: string | null;
}

/** A `tool_calls` row as both stores return it. */
export interface ToolCallRow {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
  readonly tool_name: string;
  readonly input_json: string;
  readonly status: ToolCallStatus;
  readonly output_json: string | null;
  readonly error_class: string | null;
}

export function toToolCallRecord(row: ToolCallRow): ToolCallRecord {
  return {
    id: row.id,
    session_id: row.session_id,
    turn_id: row.turn_id,
    message_id: row.message_id,
    tool_name: row.tool_name,
    input: JSON.parse(row.input_json),
    status: row.status,
    output: row.output_json === null ? null : JSON.parse(row.output_json),
    error_class: row.error_class,
  };
}

/**
 * Which row a tool call is: a provider's tool_use id is unique only within its message (an
 * OpenAI-compatible server may answer `call_1` in every turn), so the row is keyed by the message too
 * (schema version 3).
 */
export interface ToolCallKey {
  readonly id: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly message_id: string | null;
}

export interface MessageRow {
  id: string;
  session_id: string;
  turn_id: string | null;
  role: MessageRole;
  content_json: string;
  status: MessageStatus;
  model: string | null;
  usage_json: string | null;
  created_at_us: number;
}

export function toMessage(row: MessageRow): MessageRecord {
  return {
    id: row.id,
    session_id: row.session_id,
    turn_id: row.turn_id,
    role: row.role,
    content: JSON.parse(row.content_json) as unknown[],
    status: row.status,
    model: row.model,
    usage: row.usage_json === null ? null : (JSON.parse(row.usage_json) as Record<string, unknown>),
    created_at_us: row.created_at_us,
  };
}

/**
 * The canonical session/message/tool-call store that shares the trace database.
 *
 * Writes go through the connection's trace writer when one is attached (a server, a CLI that emits):
 * they commit in order with the events of the same tick, are retried with them while storage is busy
 * or full, and never throw a SQLite error into a turn. Messages still waiting for storage are read
 * from memory, so the next turn's history has them.
 */
export class SessionStore {
  /** Messages written but not committed yet, by id. */
  private readonly pendingMessages = new Map<string, MessageRecord>();
  private readonly marks = new MessageMarks();

  constructor(private readonly db: Db) {}

  /** Applies `change` now (no writer) or queues it on the writer; see the class comment. */
  private write(what: string, change: RowChange, settled?: RowWrite['settled']): void {
    writeRow(this.db, { what, change, settled });
  }

  createSession(session: {
    id: string;
    parent_session_id?: string | null;
    workspace_path: string;
    workspace_hash: string;
    active_model: string | null;
    sticky_model?: string | null;
    /** When it was made (default: now): the owner's memory of the row says the same. */
    created_at_us?: number;
  }): void {
    const now = session.created_at_us ?? nowMicros();
    this.write(`session ${session.id}`, {
      kind: 'session.create',
      sessionId: session.id,
      parentSessionId: session.parent_session_id ?? null,
      workspacePath: session.workspace_path,
      workspaceHash: session.workspace_hash,
      activeModel: session.active_model,
      stickyModel: session.sticky_model ?? null,
      atUs: now,
    });
  }

  getSession(id: string): SessionRecord | null {
    return (
      (this.db.prepare('SELECT * FROM sessions WHERE id = ?').get(id) as SessionRecord | undefined) ?? null
    );
  }

  /** Sessions other than the `system` sentinel, newest first. */
  listSessions(limit = 100): SessionRecord[] {
    return this.db
      .prepare("SELECT * FROM sessions WHERE id != 'system' ORDER BY created_at_us DESC LIMIT ?")
      .all(limit) as SessionRecord[];
  }

  /** Worker sessions spawned by a session (one level). */
  childSessionIds(parentId: string): string[] {
    return this.db
      .prepare('SELECT id FROM sessions WHERE parent_session_id = ?')
      .pluck()
      .all(parentId) as string[];
  }

  /** Newest stored event of a session, for `session.resumed.last_event_id_at_resume`. */
  lastEventId(sessionId: string): string | null {
    return (
      (this.db
        .prepare('SELECT id FROM events WHERE session_id = ? ORDER BY id DESC LIMIT 1')
        .pluck()
        .get(sessionId) as string | undefined) ?? null
    );
  }

  /** Cost recorded in the trace so far: the session's model calls plus its workers' rolled-up spend. */
  storedCost(sessionId: string): number {
    const row = this.db
      .prepare(
        `SELECT coalesce(sum(CASE type WHEN 'llm.call_completed' THEN json_extract(payload_json, '$.cost_usd')
                                   ELSE CAST(json_extract(payload_json, '$.worker_total_cost_usd') AS REAL) END), 0)
         FROM events WHERE session_id = ? AND type IN (${COST_EVENT_TYPES.map((t) => `'${t}'`).join(', ')})`,
      )
      .pluck()
      .get(sessionId) as number;
    return row;
  }

  /** Pins the session's model (`manual_sticky`); it is also the active model from now on. */
  setStickyModel(id: string, model: string): void {
    const now = nowMicros();
    this.write(`sticky model of ${id}`, { kind: 'session.sticky', sessionId: id, model, atUs: now });
  }

  /** Turns the session has run, in any process: one `turn.started` each, cancelled and failed included. */
  turnCount(sessionId: string): number {
    return this.db
      .prepare("SELECT count(*) FROM events WHERE session_id = ? AND type = 'turn.started'")
      .pluck()
      .get(sessionId) as number;
  }

  /**
   * The questions put to the user in these sessions that no stored event answered, while the turn that
   * asked is still open: what another node's session waits on, as far as its events show (the input
   * itself lives on that node; `input` is null and `input_hash` empty here).
   */
  unansweredConfirmations(sessionIds: readonly string[]): ConfirmationRequest[] {
    if (sessionIds.length === 0) return [];
    const rows = this.db
      .prepare(
        `SELECT q.session_id, q.turn_id, q.payload_json FROM events q
          WHERE q.session_id IN (SELECT value FROM json_each(?)) AND q.type = 'tool.confirmation_requested'
            AND NOT EXISTS (SELECT 1 FROM events a WHERE a.session_id = q.session_id
                  AND a.type = 'tool.confirmation_resolved'
                  AND json_extract(a.payload_json, '$.confirmation_request_id') = json_extract(q.payload_json, '$.confirmation_request_id'))
            AND NOT EXISTS (SELECT 1 FROM events e WHERE e.turn_id = q.turn_id
                  AND e.type IN ('turn.completed', 'turn.cancelled'))
          ORDER BY q.id`,
      )
      .raw()
      .all(JSON.stringify(sessionIds)) as [string, string | null, string][];
    return rows.map(([sessionId, turnId, payloadJson]) => {
      const asked = JSON.parse(payloadJson) as Omit<
        ConfirmationRequest,
        'session_id' | 'turn_id' | 'input' | 'input_hash'
      >;
      return {
        session_id: sessionId,
        turn_id: turnId,
        confirmation_request_id: asked.confirmation_request_id,
        tool_use_id: asked.tool_use_id,
        tool_name: asked.tool_name,
        side_effects: asked.side_effects,
        input: null,
        input_hash: '',
        input_summary: asked.input_summary,
        command_summary: asked.command_summary,
        projected_modifications: asked.projected_modifications,
        expires_at: asked.expires_at,
      };
    });
  }

  /** How many turns the session had, and the one started and not ended, as its stored events say. */
  turnState(sessionId: string): { turnCount: number; currentTurnId: string | null } {
    const lastEdge = this.db
      .prepare(
        `SELECT type, turn_id FROM events WHERE session_id = ?
           AND type IN ('turn.started', 'turn.completed', 'turn.cancelled') ORDER BY id DESC LIMIT 1`,
      )
      .raw()
      .get(sessionId) as [string, string | null] | undefined;
    return {
      turnCount: this.turnCount(sessionId),
      currentTurnId: lastEdge?.[0] === 'turn.started' ? lastEdge[1] : null,
    };
  }

  /** Whether the session has a stored `turn.started` with this turn id (a turn it really had). */
  hasTurn(sessionId: string, turnId: string): boolean {
    return (
      this.db
        .prepare(
          "SELECT 1 FROM events WHERE turn_id = ? AND session_id = ? AND type = 'turn.started' LIMIT 1",
        )
        .get(turnId, sessionId) !== undefined
    );
  }

  endSession(id: string, disposition: string): void {
    const now = nowMicros();
    this.write(`end of ${id}`, { kind: 'session.end', sessionId: id, disposition, atUs: now });
  }

  /**
   * Saves a message. `visibleWith` is the id of the event with which it became part of the conversation
   * (see MessageMarks), null when none did (it then shows in every snapshot from now on).
   */
  saveMessage(
    message: Omit<MessageRecord, 'created_at_us'>,
    visibleWith: string | null,
    createdAtUs: number = nowMicros(),
  ): void {
    if (visibleWith !== null) this.marks.mark(message.session_id, message.id, visibleWith);
    const now = createdAtUs;
    const pending: MessageRecord = { ...message, created_at_us: now };
    this.pendingMessages.set(message.id, pending);
    const settled = () => {
      // A later save of the same message replaced this one: that one clears the entry.
      if (this.pendingMessages.get(message.id) === pending) this.pendingMessages.delete(message.id);
    };
    this.write(
      `message ${message.id}`,
      {
        kind: 'message.upsert',
        id: message.id,
        sessionId: message.session_id,
        turnId: message.turn_id,
        role: message.role,
        contentJson: JSON.stringify(message.content),
        status: message.status,
        model: message.model,
        usageJson: message.usage === null ? null : JSON.stringify(message.usage),
        createdAtUs: now,
      },
      settled,
    );
  }

  /** Whether `messageId` is a stored message of this session. */
  hasMessage(sessionId: string, messageId: string): boolean {
    if (this.pendingMessages.get(messageId)?.session_id === sessionId) return true;
    return (
      this.db.prepare('SELECT 1 FROM messages WHERE id = ? AND session_id = ?').get(messageId, sessionId) !==
      undefined
    );
  }

  /** The newest `limit` messages before `beforeId` (or the newest overall), oldest first. */
  messages(sessionId: string, options: { beforeId?: string | null; limit?: number } = {}): MessageRecord[] {
    const rows = this.db
      .prepare(
        `SELECT * FROM messages WHERE session_id = ? AND (? IS NULL OR id < ?) ORDER BY id DESC LIMIT ?`,
      )
      .all(
        sessionId,
        options.beforeId ?? null,
        options.beforeId ?? null,
        options.limit ?? 50,
      ) as MessageRow[];
    const stored = rows.reverse().map(toMessage);
    return this.withPending(sessionId, stored, options.beforeId ?? null, options.limit ?? 50);
  }

  /**
   * The newest `limit` messages as a snapshot taken as of event `atId` shows them: without those that
   * became part of the conversation with a later event (streaming §3.4).
   */
  messagesAsOf(sessionId: string, atId: string, limit: number): MessageRecord[] {
    const later = this.marks.countAfter(sessionId, atId);
    const messages = this.messages(sessionId, { limit: limit + later });
    return later === 0
      ? messages
      : messages.filter((m) => !this.marks.isAfter(sessionId, m.id, atId)).slice(-limit);
  }

  /** `stored` with the session's messages still waiting for storage merged in, newest `limit` kept. */
  private withPending(
    sessionId: string,
    stored: MessageRecord[],
    beforeId: string | null,
    limit: number,
  ): MessageRecord[] {
    if (this.pendingMessages.size === 0) return stored;
    const pending = [...this.pendingMessages.values()].filter(
      (m) => m.session_id === sessionId && (beforeId === null || m.id < beforeId),
    );
    if (pending.length === 0) return stored;
    const byId = new Map(stored.map((m) => [m.id, m]));
    for (const message of pending) byId.set(message.id, message);
    return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).slice(-limit);
  }

  saveToolCall(call: {
    id: string;
    session_id: string;
    turn_id: string | null;
    message_id: string | null;
    tool_name: string;
    input: unknown;
    status: ToolCallStatus;
  }): void {
    const now = nowMicros();
    this.write(`tool call ${call.id}`, {
      kind: 'toolCall.insert',
      // Taken now, in queue order: rows are applied in that order, so the keys run as they did.
      rowId: nextRowId(this.db),
      id: call.id,
      sessionId: call.session_id,
      turnId: call.turn_id,
      messageId: call.message_id,
      toolName: call.tool_name,
      inputJson: JSON.stringify(call.input),
      status: call.status,
      atUs: now,
    });
  }

  updateToolCall(
    key: ToolCallKey,
    update: { status: ToolCallStatus; output?: unknown; error_class?: string | null },
  ): void {
    const now = nowMicros();
    this.write(`tool call ${key.id} ${update.status}`, {
      kind: 'toolCall.update',
      id: key.id,
      sessionId: key.session_id,
      turnId: key.turn_id,
      messageId: key.message_id,
      status: update.status,
      outputJson: update.output === undefined ? null : JSON.stringify(update.output),
      errorClass: update.error_class ?? null,
      atUs: now,
    });
  }

  /**
   * Closes the tool calls of a session (of one turn, when given) still `pending` or `running`: after a
   * turn failed, or at start-up for turns a crash cut. Returns how many rows it closed.
   */
  closeOpenToolCalls(
    sessionId: string,
    close: { turnId?: string; status: 'failed' | 'cancelled'; errorClass: string; output: string },
  ): number {
    const turnId = close.turnId ?? null;
    // Counted from what is committed; the update itself is queued behind rows not committed yet (a
    // tool call of the same turn still waiting for storage), so it closes those too.
    const open = this.db
      .prepare(
        `SELECT count(*) FROM tool_calls
         WHERE session_id = ? AND (? IS NULL OR turn_id = ?) AND status IN ('pending', 'running')`,
      )
      .pluck()
      .get(sessionId, turnId, turnId) as number;
    const now = nowMicros();
    this.write(`open tool calls of ${turnId ?? sessionId}`, {
      kind: 'toolCall.closeOpen',
      sessionId,
      turnId,
      status: close.status,
      errorClass: close.errorClass,
      outputJson: JSON.stringify(close.output),
      atUs: now,
    });
    return open;
  }

  /** The newest tool call with this provider id (in one session, when given). */
  toolCall(id: string, sessionId?: string): ToolCallRecord | null {
    const row = this.db
      .prepare(
        'SELECT * FROM tool_calls WHERE id = ? AND (? IS NULL OR session_id = ?) ORDER BY row_id DESC LIMIT 1',
      )
      .get(id, sessionId ?? null, sessionId ?? null) as ToolCallRow | undefined;
    return row === undefined ? null : toToolCallRecord(row);
  }
}
