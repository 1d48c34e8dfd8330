import type { Db } from './database.js';

export interface OpenTurn {
  readonly session_id: string;
  readonly turn_id: string;
  /** The id of its `turn.started`. */
  readonly id: string;
  readonly parent_session_id: string | null;
}

export interface TurnEventRow {
  readonly id: string;
  readonly type: string;
  readonly parent_event_id: string | null;
  readonly timestamp_us: number;
  readonly payload_json: string;
}

/**
 * What a stopped process left open in the store, for start-up recovery to close: turns that started
 * and never ended, and tool-call rows still pending or running.
 */
export interface OpenWork {
  /** Turns with a `turn.started` and neither `turn.completed` nor `turn.cancelled`, oldest first. */
  openTurns(): OpenTurn[];
  /** Every event of a turn, in id order. */
  turnEvents(turnId: string): TurnEventRow[];
  /** Sessions (with their parent) that have a tool-call row still pending or running. */
  sessionsWithOpenToolCalls(): { readonly session_id: string; readonly parent_session_id: string | null }[];
  /** How many `session.resumed` the session has after event `afterId`: the restarts since (durable turns). */
  resumedSince(sessionId: string, afterId: string): number;
}

export class SqliteOpenWork implements OpenWork {
  constructor(private readonly db: Db) {}

  openTurns(): OpenTurn[] {
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

  turnEvents(turnId: string): TurnEventRow[] {
    return this.db
      .prepare(
        'SELECT id, type, parent_event_id, timestamp_us, payload_json FROM events WHERE turn_id = ? ORDER BY id',
      )
      .all(turnId) as TurnEventRow[];
  }

  resumedSince(sessionId: string, afterId: string): number {
    return this.db
      .prepare("SELECT count(*) FROM events WHERE session_id = ? AND type = 'session.resumed' AND id > ?")
      .pluck()
      .get(sessionId, afterId) as number;
  }

  sessionsWithOpenToolCalls(): { session_id: string; parent_session_id: string | null }[] {
    return this.db
      .prepare(
        `SELECT DISTINCT t.session_id, s.parent_session_id FROM tool_calls t LEFT JOIN sessions s ON s.id = t.session_id
          WHERE t.status IN ('pending', 'running')`,
      )
      .all() as { session_id: string; parent_session_id: string | null }[];
  }
}
