import { z } from 'zod';
import {
  additive,
  defineEventType,
  nonNegativeInt,
  nonNegativeNumber,
  StopReasonSchema,
  sha256Hex,
} from '../define.js';

export const turnStarted = defineEventType({
  type: 'turn.started',
  domain: 'turn',
  schema: z.strictObject({
    user_message_hash: sha256Hex,
    user_message_text_redacted: z.string().nullable(),
    estimated_input_tokens: nonNegativeInt,
    has_images: z.boolean(),
    has_tool_calls_in_history: z.boolean(),
  }),
  sensitivity: 'private',
  actors: ['user'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'The user submitted a message; a turn began. The text itself lives in the message store.',
  // Opting into trace sharing puts redacted text in the event: the user chose to share it (§4.4.1).
  resolveSensitivity: (payload) =>
    payload.user_message_text_redacted === null ? 'private' : 'user_controlled',
});

export const turnCompleted = defineEventType({
  type: 'turn.completed',
  domain: 'turn',
  schema: z.strictObject({
    stop_reason: StopReasonSchema,
    llm_call_count: nonNegativeInt,
    tool_call_count: nonNegativeInt,
    total_input_tokens: nonNegativeInt,
    total_output_tokens: nonNegativeInt,
    total_cost_usd: nonNegativeNumber,
    wall_time_seconds: nonNegativeNumber,
    signals_extra: additive(z.record(z.string(), z.unknown())),
    user_id: additive(z.string()),
    team_id: additive(z.string()),
  }),
  sensitivity: 'pseudonymous',
  actors: ['agent'],
  phase: '1',
  audit: false,
  parent: 'turn.started',
  description: 'The agent finished the turn.',
});

export const turnCancelled = defineEventType({
  type: 'turn.cancelled',
  domain: 'turn',
  schema: z.strictObject({
    reason: z.enum(['user_cancel', 'client_disconnect', 'timeout']),
    partial_llm_calls: nonNegativeInt,
    partial_tool_calls: nonNegativeInt,
  }),
  sensitivity: 'pseudonymous',
  actors: ['user'],
  phase: '1',
  audit: false,
  parent: 'turn.started',
  description: 'The turn was cancelled by a client, a disconnect or the turn timeout.',
});

export const turnEvents = [turnStarted, turnCompleted, turnCancelled];
