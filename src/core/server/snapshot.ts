import type { MetisEvent } from '../events/envelope.js';
import type { Runtime } from '../runtime/runtime.js';
import type { Db } from '../store/database.js';
import type { RecentStreams } from './recent-streams.js';

export const SNAPSHOT_MESSAGE_LIMIT = 50;

/**
 * The snapshot frame (streaming §3.4): the session summary with cost and turn state, the last 50
 * messages, and `snapshot_at_event_id`. A message still streaming is not in the message store yet, so
 * its events so far ride along in `in_flight_events` (an additive field clients may ignore).
 */
export function buildSnapshot(
  runtime: Runtime,
  db: Db,
  recent: RecentStreams,
  sessionId: string,
  snapshotAt: string | null,
): string {
  const info = runtime.getSession(sessionId);
  const turnCount = db
    .prepare("SELECT count(*) FROM events WHERE session_id = ? AND type = 'turn.started'")
    .pluck()
    .get(sessionId) as number;
  const messages = runtime.sessions.messages(sessionId, { limit: SNAPSHOT_MESSAGE_LIMIT });
  const inFlight: MetisEvent[] =
    info.current_turn_id === null
      ? []
      : recent.inFlight(sessionId).filter((e) => snapshotAt === null || e.id <= snapshotAt);
  return JSON.stringify({
    type: 'snapshot',
    session: {
      id: info.id,
      workspace_path: info.workspace_path,
      active_model: info.active_model,
      routing_policy_version: info.routing_policy_version,
      cost_so_far_usd: info.cost_so_far_usd,
      turn_count: turnCount,
      current_turn_id: info.current_turn_id,
      current_turn_status: info.current_turn_id === null ? null : 'in_flight',
      parent_session_id: info.parent_session_id,
      status: info.status,
    },
    messages,
    snapshot_at_event_id: snapshotAt,
    in_flight_events: inFlight,
  });
}
