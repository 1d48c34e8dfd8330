/**
 * What a waiting request asks about, as `GET /sessions/{id}/confirmations` lists it: the whole input
 * (never a summary alone, so nothing the tool will run is hidden from the one who decides) and its
 * hash, the same sha256 hex as `tool.called.input_hash`, which a decision may quote back.
 */
export interface ConfirmationRequest {
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly confirmation_request_id: string;
  readonly tool_use_id: string;
  readonly tool_name: string;
  readonly side_effects: string;
  readonly input: unknown;
  readonly input_hash: string;
  readonly input_summary: string;
  readonly command_summary: string | null;
  readonly projected_modifications: readonly string[] | null;
  readonly expires_at: string;
}
