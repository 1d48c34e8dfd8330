/** What metis's HTTP API answers, as the dashboard reads it (docs/http-api.md). */

export interface SessionSummary {
  id: string;
  parent_session_id: string | null;
  active_model: string | null;
  status: 'active' | 'ended';
  created_at_us: number;
  updated_at_us: number;
  turn_count: number;
  cost_usd: number;
  last_activity_at: string | null;
  current_turn_id: string | null;
}

export interface StoredEvent {
  id: string;
  timestamp: string;
  session_id: string;
  turn_id: string | null;
  parent_event_id: string | null;
  type: string;
  actor: string;
  sensitivity: string;
  payload: Record<string, unknown>;
  seq: number | null;
}

export interface PendingConfirmation {
  confirmation_request_id: string;
  session_id: string;
  turn_id: string | null;
  tool_use_id: string;
  tool_name: string;
  side_effects: string;
  input: unknown;
  input_hash: string;
  input_summary: string;
  command_summary: string | null;
  expires_at: string;
}

export interface StoreStats {
  db_path: string;
  schema_version: number;
  file_bytes: number;
  wal_bytes: number;
  event_count: number;
  session_count: number;
  oldest_event_timestamp: string | null;
  newest_event_timestamp: string | null;
  retention_days: number;
  by_type: { type: string; count: number }[];
  by_hour: { hour: string; count: number }[];
}
