/**
 * The dashboard's calls to metis's HTTP API (docs/http-api.md). Same origin: the access token travels as
 * the cookie `metis serve` set when the page was opened with `?token=`; a 401 means the page must say
 * how to get in.
 */

export class ApiError extends Error {
  constructor(
    /** The HTTP status; 0 when the server could not be reached. */
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch {
    throw new ApiError(0, 'unreachable', 'the server cannot be reached');
  }
  const text = await response.text();
  const parsed = text === '' ? null : safeJson(text);
  if (!response.ok) {
    const error = (parsed as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(response.status, error?.code ?? `http_${response.status}`, error?.message ?? text);
  }
  return parsed as T;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

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
