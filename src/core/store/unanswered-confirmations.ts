import type { ConfirmationRequest } from '../confirmation-request.js';

/**
 * A stored `tool.confirmation_requested` as the request a client is shown of a session another node
 * runs: its input is not stored (only the summary), so `input` is null and `input_hash` empty.
 */
export function storedConfirmationRequest(
  sessionId: string,
  turnId: string | null,
  payloadJson: string,
): ConfirmationRequest {
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
}

/**
 * The requests of these sessions that no answer resolved and whose turn has not ended (PostgreSQL's
 * placeholders: `$1` the sessions as an array), in id order: SessionStore.unansweredConfirmations' rule.
 */
export const UNANSWERED_CONFIRMATIONS_SQL = `SELECT q.session_id, q.turn_id, q.payload_json FROM events q
  WHERE q.session_id = ANY($1) AND q.type = 'tool.confirmation_requested'
    AND NOT EXISTS (SELECT 1 FROM events a WHERE a.session_id = q.session_id
          AND a.type = 'tool.confirmation_resolved'
          AND a.payload_json::json->>'confirmation_request_id' = q.payload_json::json->>'confirmation_request_id')
    AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = q.session_id AND e.turn_id = q.turn_id
          AND e.type IN ('turn.completed', 'turn.cancelled'))
  ORDER BY q.id`;
