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
  /** Issue 30's list fields: absent from a server older than the search (the page then shows ids). */
  title?: string | null;
  title_source?: 'user' | 'first_message' | null;
  tags?: string[];
  model?: string | null;
  tokens?: { input: number; output: number };
  latency_ms?: { p50: number; p95: number } | null;
  last_turn_status?: SpanStatus | null;
}

export interface SessionListAnswer {
  sessions: SessionSummary[];
  next_cursor?: string | null;
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

/** A field the server withheld (`server.dashboard_content: redacted`): only its length is told. */
export interface Redacted {
  redacted: true;
  chars: number;
}
export type Readable = string | Redacted;
export type SpanStatus = 'running' | 'completed' | 'failed' | 'cancelled';

interface SpanPlace {
  parent_span_id: string | null;
  started_at_us: number;
  ended_at_us: number | null;
  end_event_id: string | null;
  duration_ms: number | null;
  status: SpanStatus;
}

export interface TurnContent extends SpanPlace {
  kind: 'turn';
  turn_id: string;
  session_id: string;
  user_message: Readable | null;
  model: string | null;
  cost_usd: number;
  input_tokens: number;
  output_tokens: number;
  stop_reason: string | null;
  cancel_reason: string | null;
  route_event_id: string | null;
}

export interface RouteContent {
  kind: 'route';
  chosen_model: string;
  policy: string | null;
  reason: string | null;
  elapsed_ms: number;
  alternatives: {
    policy: string;
    verdict: 'not_applicable' | 'deferred' | 'rejected' | 'chose';
    model: string | null;
    reason: string;
    score: number | null;
    sample_size: number | null;
  }[];
}

export interface ModelCallContent extends SpanPlace {
  kind: 'model_call';
  model: string;
  input_message_count: number | null;
  output: {
    text: Readable;
    thinking: Readable | null;
    tool_uses: { tool_use_id: string; tool_name: string }[];
  };
  stop_reason: string | null;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  cost_usd: number;
  latency_ms: number | null;
  retries: number;
  error_class: string | null;
  error_message: string | null;
}

export interface ToolCallContent extends SpanPlace {
  kind: 'tool_call';
  tool_use_id: string;
  tool_name: string;
  side_effects: string | null;
  input: unknown;
  output: unknown;
  error_class: string | null;
  error_message: Readable | null;
  latency_ms: number | null;
  worker_session_id: string | null;
}

/** What the trace adds for people to read (issue 30), by the id of the event that opens the span. */
export type TraceContentEntry = TurnContent | RouteContent | ModelCallContent | ToolCallContent;
export type TraceContent = Record<string, TraceContentEntry>;

/** A feedback or an eval verdict on a turn or a session. */
export interface Score {
  event_id: string;
  source: 'feedback' | 'eval';
  scope: 'turn' | 'session' | 'tool_cycle' | 'workload';
  turn_id: string | null;
  /** 1 thumbs up, 0 thumbs down; an eval's score in [0, 1]. */
  value: number;
  label: string;
  comment: Readable | null;
  judge: string | null;
  timestamp: string;
}

export interface TraceAnswer {
  events: StoredEvent[];
  has_more: boolean;
  content_mode?: 'full' | 'redacted';
  content?: TraceContent;
  scores?: Score[];
}

/** One bucket of one model in `GET /stats/usage`. */
export interface UsageRow {
  bucket: string;
  model: string;
  calls: number;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
  latency_p50_ms: number | null;
  latency_p95_ms: number | null;
  failures: number;
  failed_calls: number;
  failed_turns: number;
  feedback_up: number;
  feedback_down: number;
  eval_count: number;
  eval_mean: number | null;
}

export interface UsageAnswer {
  from: string;
  to: string;
  bucket: 'hour' | 'day';
  rows: UsageRow[];
}

/** A message waiting while a turn runs (`GET /sessions/{id}/queue`, docs/http-api.md "multitask"). */
export interface QueuedMessage {
  queued_id: string;
  mode: 'enqueue' | 'interrupt' | 'steer';
  message: string;
  model: string | null;
  queued_at: string;
  /** 1: the next turn; 0: a steer for the running turn (`turn_id`). */
  position: number;
  turn_id: string | null;
}

export type Multitask = 'reject' | 'enqueue' | 'interrupt' | 'steer';

interface BudgetCaps {
  usd: number | null;
  tokens: number | null;
}

interface BudgetSpend {
  caps: BudgetCaps;
  spent_usd: number;
  spent_tokens: number;
}

/** A turn held before its next model call until a cap is raised. */
export interface BudgetPause {
  session_id: string;
  turn_id: string;
  scope: 'session' | 'tree';
  budget_session_id: string;
  measure: 'usd' | 'tokens';
  spent: number;
  cap: number;
  paused_at: string;
}

/** `GET /sessions/{id}/budget`. */
export interface BudgetAnswer {
  session_id: string;
  session: BudgetSpend;
  tree: BudgetSpend & { root_session_id: string };
  paused: BudgetPause[];
}
