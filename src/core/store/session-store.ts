import type { ConfirmationRequest } from '../confirmation-request.js';
import type { Db } from './database.js';
import {
  COST_EVENT_TYPES,
  type MessageRecord,
  type MessageRow,
  type SessionRecord,
  type ToolCallRecord,
  type ToolCallRow,
  toMessage,
  toToolCallRecord,
} from './session-records.js';
import { SessionWrites } from './session-writes.js';
import { sqliteRowSink } from './trace-writer.js';
import { storedConfirmationRequest } from './unanswered-confirmations.js';
import { withUnsettled } from './unsettled-messages.js';

export type {
  MessageRecord,
  MessageRole,
  MessageRow,
  MessageStatus,
  SessionRecord,
  ToolCallKey,
  ToolCallRecord,
  ToolCallRow,
  ToolCallStatus,
} from './session-records.js';
export {
  COST_EVENT_TYPES,
  toMessage,
  toToolCallRecord,
} from './session-records.js';

/**
 * The canonical session/message/tool-call store that shares the trace database.
 *
 * Writes go through the connection's trace writer when one is attached (a server, a CLI that emits):
 * they commit in order with the events of the same tick, are retried with them while storage is busy
 * or full, and never throw a SQLite error into a turn. Messages still waiting for storage are read
 * from memory, so the next turn's history has them.
 */
export class SessionStore extends SessionWrites {
  constructor(private readonly db: Db) {
    super(sqliteRowSink(db));
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
    return rows.map(([sessionId, turnId, payloadJson]) =>
      storedConfirmationRequest(sessionId, turnId, payloadJson),
    );
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
    return withUnsettled(
      stored,
      this.unsettledMessages(sessionId),
      options.beforeId ?? null,
      options.limit ?? 50,
    );
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
