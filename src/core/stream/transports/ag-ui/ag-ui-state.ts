import type { Runtime } from '../../../runtime/runtime.js';

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
 * The state as the runtime holds it now. The model is `routedModel` (the one the session's last turn
 * was routed to, or moved to by an override: TraceLookups.lastRoutedModel, read as the run started;
 * the mapper follows the run's own routing events after it), else the session's active model: the one
 * that answers, not only the one pinned.
 */
export function sessionState(runtime: Runtime, routedModel: string | null, sessionId: string): AgUiState {
  const session = runtime.getSession(sessionId);
  return {
    model: routedModel ?? session.active_model,
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

/** The patch from `before` to `after`: one `replace` per field that changed (empty when none did). */
export function stateDelta(before: AgUiState, after: AgUiState): JsonPatch {
  return KEYS.filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key])).map((key) => ({
    op: 'replace',
    path: `/${key}`,
    value: after[key],
  }));
}
