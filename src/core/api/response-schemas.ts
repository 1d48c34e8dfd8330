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
});

export const SessionListAnswer = z.object({ sessions: z.array(ListedSession) });

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
