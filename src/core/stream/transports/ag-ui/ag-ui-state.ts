import type { Runtime } from '../../../runtime/runtime.js';
import type { Db } from '../../../store/database.js';

/** One approval the thread waits for, as the state shows it. */
export interface PendingApproval {
  readonly confirmation_request_id: string;
  readonly session_id: string;
  readonly tool_call_id: string;
  readonly tool_name: string;
  readonly side_effects: string;
  readonly input_summary: string;
  readonly expires_at: string;
}

/**
 * The session as an AG-UI client renders it (`STATE_SNAPSHOT`, then `STATE_DELTA`): the model that
 * answers, the approvals waiting (its workers' too) and what the session has cost. metis owns it: the
 * `state` a client sends is not read.
 */
export interface AgUiState {
  readonly model: string;
  readonly pending_approvals: readonly PendingApproval[];
  readonly cost_usd: number;
}

type StateKey = keyof AgUiState;
const KEYS: readonly StateKey[] = ['model', 'pending_approvals', 'cost_usd'];

/** JSON Patch (RFC 6902), as `STATE_DELTA.delta` carries it. */
export type JsonPatch = { op: 'replace'; path: string; value: unknown }[];

/**
 * The state as stored now. The model is the one the session's last turn was routed to (or moved to by
 * an override), else the session's active model: the one that answers, not only the one pinned.
 */
export function sessionState(runtime: Runtime, db: Db, sessionId: string): AgUiState {
  const session = runtime.getSession(sessionId);
  const routed = routedModelQuery(db).get(sessionId) as string | undefined;
  return {
    model: routed ?? session.active_model,
    pending_approvals: runtime.pendingConfirmations(sessionId).map((request) => ({
      confirmation_request_id: request.confirmation_request_id,
      session_id: request.session_id,
      tool_call_id: request.tool_use_id,
      tool_name: request.tool_name,
      side_effects: request.side_effects,
      input_summary: request.input_summary,
      expires_at: request.expires_at,
    })),
    cost_usd: session.cost_so_far_usd,
  };
}

const routedModelQueries = new WeakMap<Db, ReturnType<Db['prepare']>>();

/** The last routed model of a session, prepared once per database. */
function routedModelQuery(db: Db): ReturnType<Db['prepare']> {
  let query = routedModelQueries.get(db);
  if (query === undefined) {
    query = db
      .prepare(
        `SELECT coalesce(json_extract(payload_json, '$.chosen_model'), json_extract(payload_json, '$.new_chosen_model'))
         FROM events WHERE session_id = ? AND type IN ('route.decided', 'route.overridden') ORDER BY id DESC LIMIT 1`,
      )
      .pluck();
    routedModelQueries.set(db, query);
  }
  return query;
}

/** The patch from `before` to `after`: one `replace` per field that changed (empty when none did). */
export function stateDelta(before: AgUiState, after: AgUiState): JsonPatch {
  return KEYS.filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key])).map((key) => ({
    op: 'replace',
    path: `/${key}`,
    value: after[key],
  }));
}
