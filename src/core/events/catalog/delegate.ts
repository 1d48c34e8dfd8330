import { z } from 'zod';
import { decimalString, defineEventType, nonNegativeInt, nonNegativeNumber } from '../define.js';

export const delegateStarted = defineEventType({
  type: 'delegate.started',
  domain: 'delegate',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    worker_session_id: z.string().min(1),
    tier: z.enum(['fast', 'balanced', 'deep']),
    resolved_model: z.string().min(1),
    context_mode: z.enum(['minimal', 'explicit']),
    context_reference_count: nonNegativeInt,
    task_size_tokens: nonNegativeInt,
    allowed_tool_count: nonNegativeInt,
    dropped_tools: z.array(z.string()),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '4',
  audit: false,
  parent: 'llm.call_completed (the planner call that emitted the delegate() tool_use)',
  description: 'The planner delegated a sub-task to a worker session.',
});

export const delegateCompleted = defineEventType({
  type: 'delegate.completed',
  domain: 'delegate',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    worker_session_id: z.string().min(1),
    success: z.boolean(),
    output_size_bytes: nonNegativeInt,
    worker_total_cost_usd: decimalString,
    pricing_version: z.string(),
    turn_count: nonNegativeInt,
    llm_call_count: nonNegativeInt,
    tool_call_count: nonNegativeInt,
    wall_time_seconds: nonNegativeNumber,
    model: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '4',
  audit: false,
  parent: 'delegate.started',
  description: "A worker session finished its sub-task; carries the worker's total spend.",
});

export const delegateFailed = defineEventType({
  type: 'delegate.failed',
  domain: 'delegate',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    worker_session_id: z.string().nullable(),
    failure_mode: z.enum([
      'worker_error',
      'max_tokens_exceeded',
      'insufficient_context',
      'output_schema_validation_failed',
      'no_model_available_for_tier',
      'cancelled_by_user',
    ]),
    error_message: z.string(),
    worker_total_cost_usd: decimalString,
    pricing_version: z.string(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '4',
  audit: false,
  parent: "delegate.started, or the planner's llm.call_completed when no worker session was created",
  description: 'A delegated sub-task failed or was cancelled; carries the partial spend.',
});

export const delegateEvents = [delegateStarted, delegateCompleted, delegateFailed];
