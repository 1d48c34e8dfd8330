import type { Db } from './database.js';
import { RECENT_MESSAGES } from './family-state.js';
import {
  type MessageRecord,
  type SessionRecord,
  SessionStore,
  type ToolCallRecord,
} from './session-store.js';
import { SqliteStreamArchiveRows } from './stream-archive-rows.js';

export interface OpenTurn {
  readonly session_id: string;
  readonly turn_id: string;
  /** The id of its `turn.started`. */
  readonly id: string;
  readonly parent_session_id: string | null;
}

/** A session with tool-call rows still pending or running. */
export interface OpenToolCalls {
  readonly session_id: string;
  readonly parent_session_id: string | null;
  readonly open_calls: number;
}

export interface TurnEventRow {
  readonly id: string;
  readonly type: string;
  readonly parent_event_id: string | null;
  readonly timestamp_us: number;
  readonly payload_json: string;
}

/**
 * What a stopped process left open in the store, and what closing it needs to know, for start-up
 * recovery and a take-over (runtime/open-work-plan.ts): turns that started and never ended, tool-call
 * rows still pending or running, and of their sessions what a turn that resumes or a worker that ends
 * is told. Asynchronous, so that a store over the network can answer (docs/plans/store-port.md step 5).
 */
export interface OpenWork {
  /** Turns with a `turn.started` and neither `turn.completed` nor `turn.cancelled`, oldest first. */
  openTurns(): Promise<OpenTurn[]>;
  /** Every event of a turn, in id order. */
  turnEvents(turnId: string): Promise<TurnEventRow[]>;
  /** Sessions (with their parent) that have tool-call rows still pending or running, and how many. */
  sessionsWithOpenToolCalls(): Promise<OpenToolCalls[]>;
  /** How many `session.resumed` the session has after event `afterId`: the restarts since (durable turns). */
  resumedSince(sessionId: string, afterId: string): Promise<number>;
  session(sessionId: string): Promise<SessionRecord | null>;
  /** What the session's stored events cost (its model calls, and its workers as their delegations report). */
  storedCost(sessionId: string): Promise<number>;
  turnCount(sessionId: string): Promise<number>;
  /** The highest `seq` stored for the session (0: none): what its next event follows. */
  lastSeq(sessionId: string): Promise<number>;
  /** The turn's stored messages, oldest first. */
  turnMessages(sessionId: string, turnId: string): Promise<MessageRecord[]>;
  toolCall(toolUseId: string, sessionId: string): Promise<ToolCallRecord | null>;
  /** The streaming events archived for the session after `afterId` (JSON), oldest first. */
  archivedAfter(sessionId: string, afterId: string, limit: number): Promise<string[]>;
}

/** The open work of a SQLite store, answered at the call. */
export class SqliteOpenWork implements OpenWork {
  private readonly sessions: SessionStore;
  private readonly archive: SqliteStreamArchiveRows;

  constructor(private readonly db: Db) {
    this.sessions = new SessionStore(db);
    this.archive = new SqliteStreamArchiveRows(db);
  }

  async openTurns(): Promise<OpenTurn[]> {
    return this.db
      .prepare(
        `SELECT s.session_id, s.turn_id, s.id, se.parent_session_id FROM events s
         JOIN sessions se ON se.id = s.session_id
         WHERE s.type = 'turn.started' AND s.turn_id IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM events e WHERE e.turn_id = s.turn_id AND e.type IN ('turn.completed', 'turn.cancelled'))
         ORDER BY s.id`,
      )
      .all() as OpenTurn[];
  }

  async turnEvents(turnId: string): Promise<TurnEventRow[]> {
    return this.db
      .prepare(
        'SELECT id, type, parent_event_id, timestamp_us, payload_json FROM events WHERE turn_id = ? ORDER BY id',
      )
      .all(turnId) as TurnEventRow[];
  }

  async resumedSince(sessionId: string, afterId: string): Promise<number> {
    return this.db
      .prepare("SELECT count(*) FROM events WHERE session_id = ? AND type = 'session.resumed' AND id > ?")
      .pluck()
      .get(sessionId, afterId) as number;
  }

  async sessionsWithOpenToolCalls(): Promise<OpenToolCalls[]> {
    return this.db
      .prepare(
        `SELECT t.session_id, s.parent_session_id, count(*) AS open_calls
           FROM tool_calls t LEFT JOIN sessions s ON s.id = t.session_id
          WHERE t.status IN ('pending', 'running') GROUP BY t.session_id, s.parent_session_id`,
      )
      .all() as OpenToolCalls[];
  }

  async session(sessionId: string): Promise<SessionRecord | null> {
    return this.sessions.getSession(sessionId);
  }

  async storedCost(sessionId: string): Promise<number> {
    return this.sessions.storedCost(sessionId);
  }

  async turnCount(sessionId: string): Promise<number> {
    return this.sessions.turnCount(sessionId);
  }

  async lastSeq(sessionId: string): Promise<number> {
    return this.db
      .prepare('SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ?')
      .pluck()
      .get(sessionId) as number;
  }

  async turnMessages(sessionId: string, turnId: string): Promise<MessageRecord[]> {
    return this.sessions.messages(sessionId, { limit: RECENT_MESSAGES }).filter((m) => m.turn_id === turnId);
  }

  async toolCall(toolUseId: string, sessionId: string): Promise<ToolCallRecord | null> {
    return this.sessions.toolCall(toolUseId, sessionId);
  }

  async archivedAfter(sessionId: string, afterId: string, limit: number): Promise<string[]> {
    return this.archive.after(sessionId, afterId, limit);
  }
}
