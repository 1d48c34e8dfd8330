import { z } from 'zod';

/**
 * The 2xx answers of the HTTP API (http-api.ts), for `GET /openapi.json` and the clients generated from
 * it. Each is written from what its handler returns; `jsonRoute` checks the two agree at compile time.
 */

const count = z.int().nonnegative();
const usd = z.number().describe('US dollars');
const micros = z.int().describe('unix time in microseconds');

export const HealthAnswer = z.object({
  status: z.enum(['ok', 'degraded']),
  store: z
    .object({ state: z.enum(['ok', 'unavailable']) })
    .optional()
    .describe('on a PostgreSQL store only'),
  broker: z
    .object({ state: z.enum(['connected', 'reconnecting', 'closed']) })
    .optional()
    .describe('in a cluster only'),
});

/** A session as the runtime has it (live-sessions.ts SessionInfo). */
export const SessionInfoAnswer = z.object({
  id: z.string(),
  workspace_path: z.string(),
  parent_session_id: z.string().nullable(),
  active_model: z.string(),
  routing_policy_version: z.string(),
  turn_count: count,
  cost_so_far_usd: usd,
  current_turn_id: z.string().nullable(),
  status: z.enum(['active', 'ended']),
});

export const CreatedSessionAnswer = z.object({
  session_id: z.string().describe('the same as id'),
  ...SessionInfoAnswer.shape,
});

/** A row of the session list: the stored session (session-store.ts SessionRecord) and its activity. */
const ListedSession = z.object({
  id: z.string(),
  parent_session_id: z.string().nullable(),
  workspace_path: z.string().nullable(),
  workspace_hash: z.string().nullable(),
  active_model: z.string().nullable(),
  sticky_model: z.string().nullable().describe('the model the user pinned (manual_sticky), if any'),
  status: z.enum(['active', 'ended']),
  disposition: z.string().nullable(),
  created_at_us: micros,
  updated_at_us: micros,
  turn_count: count,
  cost_usd: usd.describe('every model call paid for, cancelled turns included'),
  last_activity_at: z.string().nullable().describe('ISO 8601 time of the newest stored event'),
  current_turn_id: z.string().nullable(),
  title: z
    .string()
    .nullable()
    .describe('the title the user set, else the first user message cut to 80 chars'),
  title_source: z.enum(['user', 'first_message']).nullable(),
  tags: z.array(z.string()).describe('e.g. conformance: made by `metis conformance run`'),
  model: z.string().nullable().describe('the model of its last model call'),
  tokens: z.object({ input: count, output: count }),
  latency_ms: z
    .object({ p50: z.number(), p95: z.number() })
    .nullable()
    .describe('of its completed model calls (from a log histogram: within ~4.4%); null before the first'),
  last_turn_status: z.enum(['running', 'completed', 'failed', 'cancelled']).nullable(),
});

export const SessionListAnswer = z.object({
  sessions: z.array(ListedSession),
  next_cursor: z.string().nullable().describe('pass as cursor for the next page; null on the last'),
});

/** `PATCH /sessions/{session_id}`: the session as the list shows it. */
export const SessionItemAnswer = ListedSession;

/** `GET /stats/usage`: one row per bucket and model. */
export const UsageAnswer = z.object({
  from: z.string(),
  to: z.string(),
  bucket: z.enum(['hour', 'day']),
  rows: z.array(
    z.object({
      bucket: z.string().describe('start of the bucket, ISO 8601 UTC'),
      model: z.string(),
      calls: count,
      input_tokens: count,
      output_tokens: count,
      cost_usd: usd,
      latency_p50_ms: z.number().nullable(),
      latency_p95_ms: z.number().nullable(),
      failures: count.describe('llm.call_failed (not cancels) and failed turns'),
      failed_calls: count,
      failed_turns: count,
      feedback_up: count,
      feedback_down: count,
      eval_count: count,
      eval_mean: z.number().nullable(),
    }),
  ),
});

export const AttachAnswer = z.object({
  session_id: z.string(),
  active_model: z.string(),
  attach_token: z.string().describe('single use, bound to this session, valid 60 s'),
  ws_url: z.string().describe('the WebSocket stream, with the attach token in its query'),
  session: SessionInfoAnswer,
});

export const TurnStartedAnswer = z.object({ turn_id: z.string() });

export const CancelAnswer = z.object({
  turn_id: z.string(),
  status: z.enum(['cancelling', 'already_cancelling', 'already_ended']),
});

/** A canonical message (session-store.ts MessageRecord). */
const Message = z.object({
  id: z.string(),
  session_id: z.string(),
  turn_id: z.string().nullable(),
  role: z.enum(['user', 'assistant', 'tool']),
  content: z.array(z.unknown()).describe('content blocks'),
  status: z.enum(['complete', 'cancelled', 'error']),
  model: z.string().nullable(),
  usage: z.record(z.string(), z.unknown()).nullable(),
  created_at_us: micros,
});

export const MessagesAnswer = z.object({ messages: z.array(Message), has_more: z.boolean() });

/** A tool call waiting for a decision (confirmation-request.ts). */
const Confirmation = z.object({
  session_id: z.string(),
  turn_id: z.string().nullable(),
  confirmation_request_id: z.string(),
  tool_use_id: z.string(),
  tool_name: z.string(),
  side_effects: z.string(),
  input: z.unknown().describe('the whole input; null when another node of a cluster holds the request'),
  input_hash: z.string().describe('sha256 hex of the input; empty when another node holds the request'),
  input_summary: z.string(),
  command_summary: z.string().nullable(),
  projected_modifications: z.array(z.string()).nullable(),
  expires_at: z.string().describe('ISO 8601'),
});

export const ConfirmationsAnswer = z.object({ confirmations: z.array(Confirmation) });

export const DecisionAnswer = z.object({
  confirmation_request_id: z.string(),
  decision: z.enum(['allow', 'deny']),
});

export const FeedbackAnswer = z.object({
  event_id: z.string().describe('the feedback.explicit event'),
  scope: z.enum(['turn', 'session']),
  rating: z.enum(['thumbs_up', 'thumbs_down']),
});

export const EndAnswer = z.object({
  session_id: z.string(),
  status: z.literal('ended'),
  disposition: z.enum(['completed', 'abandoned', 'error']).describe('the one it ended with, if it had'),
});

export const OverrideAnswer = z.object({
  turn_id: z.string(),
  original_chosen_model: z.string(),
  new_chosen_model: z.string(),
});

export const DismissAnswer = z.object({
  turn_id: z.string(),
  chosen_model: z.string(),
  dismissed_pattern_model: z.string(),
});

export const PatternsClearedAnswer = z.object({ entries_evicted: count });

// ---- Issue 30: the trace's content, the searchable session list, scores and usage over time. ----

/**
 * A field the viewer may not read (`server.dashboard_content: redacted` and a catalog sensitivity above
 * pseudonymous): only its length stays, in characters of its text (of its JSON for a structured value).
 */
export const RedactedField = z.object({ redacted: z.literal(true), chars: count });

const ReadableText = z.union([z.string(), RedactedField]);
const ReadableJson = z.unknown().describe('the JSON value, or {redacted: true, chars} when redacted');
const SpanStatus = z.enum(['running', 'completed', 'failed', 'cancelled']);

/** Where a span sits: the span-tree parent (an event id that is itself a key of `content`) and its times. */
const SpanPlace = z.object({
  parent_span_id: z
    .string()
    .nullable()
    .describe(
      'the content key of the enclosing span: a model call → its turn.started; a tool call → the llm.call_started that asked for it; a worker turn → the delegating tool.called (when the worker is in the answer); a turn → null',
    ),
  started_at_us: micros,
  ended_at_us: micros.nullable().describe('null while running'),
  end_event_id: z.string().nullable().describe('the event that closed the span'),
  duration_ms: z.number().nullable(),
  status: SpanStatus,
});

const TurnContent = z.object({
  kind: z.literal('turn'),
  turn_id: z.string(),
  session_id: z.string(),
  ...SpanPlace.shape,
  user_message: ReadableText.nullable().describe('the text the user sent; null when not stored'),
  model: z.string().nullable().describe('route.decided.chosen_model'),
  cost_usd: usd,
  input_tokens: count,
  output_tokens: count,
  model_call_count: count,
  tool_call_count: count,
  stop_reason: z.string().nullable(),
  cancel_reason: z.string().nullable(),
  route_event_id: z.string().nullable().describe('the key of its `route` entry'),
});

const RouteAlternative = z.object({
  policy: z.string(),
  verdict: z.enum(['not_applicable', 'deferred', 'rejected', 'chose']),
  model: z.string().nullable(),
  reason: z.string(),
  score: z.number().nullable().describe('pattern score or rule confidence, when the policy gave one'),
  sample_size: count.nullable(),
});

const RouteContent = z.object({
  kind: z.literal('route'),
  turn_id: z.string().nullable(),
  parent_span_id: z.string().nullable().describe('its turn.started'),
  chosen_model: z.string(),
  policy: z.string().nullable().describe('the policy that chose'),
  reason: z.string().nullable(),
  elapsed_ms: z.number(),
  alternatives: z
    .array(RouteAlternative)
    .describe('every verdict of the chain, and each pattern alternative, in chain order'),
});

const ModelCallContent = z.object({
  kind: z.literal('model_call'),
  turn_id: z.string().nullable(),
  ...SpanPlace.shape,
  model: z.string(),
  provider: z.string(),
  message_id: z.string().nullable().describe('the stored assistant message it produced'),
  input_message_count: count
    .nullable()
    .describe("messages of the session's history stored before the call (the conversation it was sent)"),
  output: z.object({
    text: ReadableText.describe('the text blocks, joined'),
    thinking: ReadableText.nullable().describe('the thinking blocks, joined; null when none'),
    tool_uses: z.array(z.object({ tool_use_id: z.string(), tool_name: z.string() })),
  }),
  stop_reason: z.string().nullable(),
  input_tokens: count,
  output_tokens: count,
  cached_input_tokens: count,
  cost_usd: usd,
  latency_ms: count.nullable(),
  retries: count.describe('provider retries before the answer (llm.call_failed.retry_count)'),
  error_class: z.string().nullable(),
  error_message: z.string().nullable(),
});

const ToolCallContent = z.object({
  kind: z.literal('tool_call'),
  turn_id: z.string().nullable(),
  ...SpanPlace.shape,
  tool_use_id: z.string(),
  tool_name: z.string(),
  side_effects: z.string().nullable(),
  input: ReadableJson,
  output: ReadableJson.describe('the result the model was given; null when none yet'),
  error_class: z.string().nullable(),
  error_message: ReadableText.nullable(),
  latency_ms: count.nullable(),
  worker_session_id: z.string().nullable().describe('a delegate() call: the worker session it started'),
});

/** One entry of `content`, by the event id that opens the span (turn.started, llm.call_started, …). */
export const TraceContentEntry = z.discriminatedUnion('kind', [
  TurnContent,
  RouteContent,
  ModelCallContent,
  ToolCallContent,
]);

/** Feedback and eval verdicts of a session (`GET /sessions/{id}/scores`, and `scores` in the trace). */
export const ScoreEntry = z.object({
  event_id: z.string(),
  source: z.enum(['feedback', 'eval']),
  scope: z.enum(['turn', 'session', 'tool_cycle', 'workload']),
  turn_id: z.string().nullable().describe('the turn it judges, for scope turn'),
  value: z.number().describe('1 thumbs up, 0 thumbs down; an eval score in [0, 1]'),
  label: z.string().describe('thumbs_up | thumbs_down | the rubric id'),
  comment: ReadableText.nullable(),
  judge: z.string().nullable().describe('heuristic | llm | hybrid, and the judge model'),
  timestamp: z.string(),
});

export const ScoresAnswer = z.object({
  session_id: z.string(),
  scores: z.array(ScoreEntry),
  summary: z.object({
    thumbs_up: count,
    thumbs_down: count,
    eval_count: count,
    eval_mean: z.number().nullable(),
  }),
});
