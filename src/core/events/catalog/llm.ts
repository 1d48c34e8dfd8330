import { z } from 'zod';
import { additive, defineEventType, nonNegativeInt, nonNegativeNumber, StopReasonSchema } from '../define.js';

/** How a model call failed, as provider adapters classify it (the catalog's one spelling). */
export const ERROR_CLASSES = [
  'rate_limit',
  'auth',
  'server_error',
  'network',
  'context_overflow',
  'invalid_request',
  'cancelled',
  'other',
] as const;

export type ErrorClass = (typeof ERROR_CLASSES)[number];

export const llmCallStarted = defineEventType({
  type: 'llm.call_started',
  domain: 'llm',
  schema: z.strictObject({
    model: z.string().min(1),
    provider: z.string().min(1),
    estimated_input_tokens: nonNegativeInt,
    request_id: z.string().min(1),
    is_worker: z.boolean(),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  phase: '1',
  audit: false,
  parent: 'turn.started (first call) or tool.completed (subsequent calls)',
  description: 'The agent loop started a model call.',
});

export const llmCallCompleted = defineEventType({
  type: 'llm.call_completed',
  domain: 'llm',
  schema: z.strictObject({
    model: z.string().min(1),
    provider: z.string().min(1),
    input_tokens: nonNegativeInt,
    output_tokens: nonNegativeInt,
    cached_input_tokens: nonNegativeInt,
    cache_creation_input_tokens: nonNegativeInt,
    cost_usd: nonNegativeNumber,
    pricing_version: z.string(),
    latency_ms: nonNegativeInt,
    stop_reason: StopReasonSchema,
    produced_tool_calls: nonNegativeInt,
    produced_thinking_blocks: nonNegativeInt,
    // Additive (§4.5): the provider's own request id; llm.call_started.request_id is metis's, minted
    // before the request is sent (docs/decisions.md "The provider's request id").
    provider_request_id: additive(z.string().min(1).max(200)),
    gateway_key_id: additive(z.string()),
    inbound_shape: additive(z.enum(['openai', 'anthropic'])),
    user_id: additive(z.string()),
    team_id: additive(z.string()),
  }),
  sensitivity: 'pseudonymous',
  actors: ['agent'],
  phase: '1',
  audit: false,
  parent: 'llm.call_started',
  description: 'A model call finished; carries the final usage and cost.',
});

export const llmCallFailed = defineEventType({
  type: 'llm.call_failed',
  domain: 'llm',
  schema: z.strictObject({
    model: z.string().min(1),
    provider: z.string().min(1),
    // The spec types this `str` and lists the provider-adapter ErrorClass values in a comment.
    error_class: z.enum(ERROR_CLASSES),
    error_message_redacted: z.string(),
    retry_count: nonNegativeInt,
    latency_ms: nonNegativeInt,
    provider_request_id: additive(z.string().min(1).max(200)),
  }),
  sensitivity: 'pseudonymous',
  actors: ['agent'],
  phase: '1',
  audit: false,
  parent: 'llm.call_started',
  description: 'A model call failed or was cancelled.',
});

export const llmEvents = [llmCallStarted, llmCallCompleted, llmCallFailed];
