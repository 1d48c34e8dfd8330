import type { Db } from './database.js';
import { COST_EVENT_TYPES } from './session-store.js';

/** A session's turn state and spend as its stored events up to one id show them. */
export interface SessionAsOf {
  readonly turnCount: number;
  /** The turn started and not yet ended as of the id, if any. */
  readonly currentTurnId: string | null;
  readonly costUsd: number;
}

const TURN_EDGES = "('turn.started', 'turn.completed', 'turn.cancelled')";

/**
 * The summary fields of a snapshot taken as of event `atId` (streaming §3.4), read from the store:
 * every event up to a released id is committed, so these reflect exactly the events up to it, never
 * one the client is still to receive (issue 14 obs. 1: the runtime's live state runs ahead of it).
 * Spend is counted as `SessionStore.storedCost` counts it.
 */
export function sessionAsOf(db: Db, sessionId: string, atId: string): SessionAsOf {
  const [turnCount, cost] = db
    .prepare(
      `SELECT count(*) FILTER (WHERE type = 'turn.started'),
              coalesce(sum(CASE type
                WHEN 'turn.started' THEN 0
                WHEN 'llm.call_completed' THEN json_extract(payload_json, '$.cost_usd')
                ELSE CAST(json_extract(payload_json, '$.worker_total_cost_usd') AS REAL) END), 0)
       FROM events
       WHERE session_id = ? AND id <= ?
         AND type IN ('turn.started', ${COST_EVENT_TYPES.map((t) => `'${t}'`).join(', ')})`,
    )
    .raw()
    .get(sessionId, atId) as [number, number];
  const lastEdge = db
    .prepare(
      `SELECT type, turn_id FROM events WHERE session_id = ? AND id <= ? AND type IN ${TURN_EDGES}
       ORDER BY id DESC LIMIT 1`,
    )
    .raw()
    .get(sessionId, atId) as [string, string | null] | undefined;
  return {
    turnCount,
    currentTurnId: lastEdge?.[0] === 'turn.started' ? lastEdge[1] : null,
    costUsd: Math.round(cost * 1e8) / 1e8,
  };
}

/** The newest stored event of these sessions before `beforeId`, or null. */
export function storedEventBefore(db: Db, sessionIds: readonly string[], beforeId: string): string | null {
  let newest: string | null = null;
  const statement = db.prepare('SELECT max(id) FROM events WHERE session_id = ? AND id < ?').pluck();
  for (const sessionId of sessionIds) {
    const id = statement.get(sessionId, beforeId) as string | null;
    if (id !== null && (newest === null || id > newest)) newest = id;
  }
  return newest;
}
