import type { Db } from './database.js';

/** What the dashboard's session list shows beside the session itself. */
export interface SessionActivity {
  readonly turn_count: number;
  /** The sum of `llm.call_completed.cost_usd`: every model call paid for, cancelled turns included. */
  readonly cost_usd: number;
  /** The newest stored event of the session (ISO 8601), or null before its first. */
  readonly last_activity_at: string | null;
}

const NONE: SessionActivity = { turn_count: 0, cost_usd: 0, last_activity_at: null };

/**
 * Turn count, cost and last activity of each session, in one pass over their events (the primary key
 * `(session_id, id)` keeps each session's rows together; the list asks for 100 sessions at most).
 */
export function sessionActivity(db: Db, sessionIds: readonly string[]): Map<string, SessionActivity> {
  const activity = new Map<string, SessionActivity>();
  if (sessionIds.length === 0) return activity;
  const rows = db
    .prepare(
      `SELECT session_id,
              sum(type = 'turn.started') AS turn_count,
              coalesce(sum(CASE WHEN type = 'llm.call_completed'
                                THEN json_extract(payload_json, '$.cost_usd') END), 0) AS cost_usd,
              max(timestamp_us) AS last_us
         FROM events
        WHERE session_id IN (SELECT value FROM json_each(?))
        GROUP BY session_id`,
    )
    .all(JSON.stringify(sessionIds)) as {
    session_id: string;
    turn_count: number;
    cost_usd: number;
    last_us: number;
  }[];
  for (const row of rows)
    activity.set(row.session_id, {
      turn_count: row.turn_count,
      cost_usd: row.cost_usd,
      last_activity_at: new Date(Math.floor(row.last_us / 1000)).toISOString(),
    });
  for (const id of sessionIds) if (!activity.has(id)) activity.set(id, NONE);
  return activity;
}
