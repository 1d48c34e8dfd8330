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
const COST_TYPES = `(${COST_EVENT_TYPES.map((t) => `'${t}'`).join(', ')})`;
const COST_OF_ROW = `CASE type WHEN 'llm.call_completed' THEN json_extract(payload_json, '$.cost_usd')
  ELSE CAST(json_extract(payload_json, '$.worker_total_cost_usd') AS REAL) END`;

/** A running cost and the newest event it counts (runtime/cost-accumulator.ts `counted`). */
export interface CountedCost {
  readonly costUsd: number;
  readonly upTo: string | null;
  /** The newest counted amounts, oldest first: those after a point may not be stored yet. */
  readonly recent: readonly { readonly id: string; readonly amount: number }[];
}

/**
 * The summary fields of a snapshot taken as of event `atId` (streaming §3.4), from the store: every
 * event up to a released id is committed, so these reflect exactly the events up to it, never one the
 * client is still to receive (issue 14 obs. 1: the runtime's live state runs ahead of it). Each is
 * derived from a whole-session figure and the few stored events between it and `atId` (the point is
 * at most a message back), not from a scan of the session: spend is the running cost corrected by the
 * cost events between the id it counts up to and `atId`, counted as `SessionStore.storedCost` does.
 */
export function sessionAsOf(db: Db, sessionId: string, atId: string, counted: CountedCost): SessionAsOf {
  const storedTurns = db
    .prepare("SELECT count(*) FROM events WHERE type = 'turn.started' AND session_id = ?")
    .pluck()
    .get(sessionId) as number;
  const turnsAfter = db
    .prepare("SELECT count(*) FROM events WHERE session_id = ? AND id > ? AND type = 'turn.started'")
    .pluck()
    .get(sessionId, atId) as number;
  const lastEdge = db
    .prepare(
      `SELECT type, turn_id FROM events WHERE session_id = ? AND id <= ? AND type IN ${TURN_EDGES}
       ORDER BY id DESC LIMIT 1`,
    )
    .raw()
    .get(sessionId, atId) as [string, string | null] | undefined;
  return {
    turnCount: storedTurns - turnsAfter,
    currentTurnId: lastEdge?.[0] === 'turn.started' ? lastEdge[1] : null,
    costUsd: roundedCost(costAsOf(db, sessionId, atId, counted)),
  };
}

/** A spend as a snapshot shows it: to 1e-8 USD, so summing in another order gives the same figure. */
export function roundedCost(costUsd: number): number {
  return Math.round(costUsd * 1e8) / 1e8;
}

function costAsOf(db: Db, sessionId: string, atId: string, counted: CountedCost): number {
  // Two statements, not `(? IS NULL OR id > ?)`: the OR would turn the range into a scan of the session.
  const between = (after: string | null, upTo: string) =>
    (after === null
      ? db
          .prepare(
            `SELECT coalesce(sum(${COST_OF_ROW}), 0) FROM events
             WHERE session_id = ? AND id <= ? AND type IN ${COST_TYPES}`,
          )
          .pluck()
          .get(sessionId, upTo)
      : db
          .prepare(
            `SELECT coalesce(sum(${COST_OF_ROW}), 0) FROM events
             WHERE session_id = ? AND id > ? AND id <= ? AND type IN ${COST_TYPES}`,
          )
          .pluck()
          .get(sessionId, after, upTo)) as number;
  // Nothing counted yet: the stored events up to the point are all there is.
  if (counted.upTo === null) return between(null, atId);
  // Behind the point: add what is stored between (all of it is, up to a released point).
  if (counted.upTo <= atId) return counted.costUsd + between(counted.upTo, atId);
  // Ahead of it: take back what was counted after the point, from memory (it may still wait for its
  // commit), when the memory reaches back to the point; else count the stored events up to it.
  const oldest = counted.recent[0];
  if (oldest === undefined || oldest.id > atId) return between(null, atId);
  let after = 0;
  for (const entry of counted.recent) if (entry.id > atId) after += entry.amount;
  return counted.costUsd - after;
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
