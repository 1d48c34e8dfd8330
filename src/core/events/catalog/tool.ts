import { z } from 'zod';
import { defineEventType, isoDatetime, nonNegativeInt, sha256Hex } from '../define.js';

export const toolCalled = defineEventType({
  type: 'tool.called',
  domain: 'tool',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    tool_name: z.string().min(1),
    input_hash: sha256Hex,
    input_size_bytes: nonNegativeInt,
    side_effects: z.enum(['none', 'read', 'write', 'execute', 'network']),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  phase: '1',
  audit: false,
  parent: 'llm.call_completed',
  description: 'The dispatcher started a tool call; the input itself lives in the ToolUseBlock.',
});

export const toolCompleted = defineEventType({
  type: 'tool.completed',
  domain: 'tool',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    success: z.boolean(),
    output_size_bytes: nonNegativeInt,
    latency_ms: nonNegativeInt,
    files_modified: z.array(z.string()).nullable(),
    command_executed: z.string().nullable(),
  }),
  sensitivity: 'private',
  actors: ['tool'],
  phase: '1',
  audit: false,
  parent: 'tool.called',
  description: 'A tool call returned; side-effect details are recorded for write and execute tools.',
});

export const toolFailed = defineEventType({
  type: 'tool.failed',
  domain: 'tool',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    error_class: z.enum([
      'timeout',
      'permission_denied',
      'not_found',
      'validation_error',
      'execution_error',
      'cancelled',
      'user_denied',
      'confirmation_timeout',
    ]),
    error_message: z.string(),
    latency_ms: nonNegativeInt,
  }),
  sensitivity: 'private',
  actors: ['tool'],
  phase: '1',
  audit: false,
  parent: 'tool.called',
  description: 'A tool call failed, was cancelled, or was denied by the user.',
});

export const toolInputInvalid = defineEventType({
  type: 'tool.input_invalid',
  domain: 'tool',
  schema: z.strictObject({
    tool_name: z.string().min(1),
    validation_errors: z.array(z.string()),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'llm.call_completed',
  description: "A tool_use input failed validation against the tool's JSON Schema.",
});

export const toolConfirmationRequested = defineEventType({
  type: 'tool.confirmation_requested',
  domain: 'tool',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    tool_name: z.string().min(1),
    // `read` is not in the spec's list (write|execute|network): a read of a file outside the workspace
    // or of a secrets file asks too, and calling it `execute` would lie (docs/decisions.md).
    side_effects: z.enum(['read', 'write', 'execute', 'network']),
    confirmation_request_id: z.string().min(1),
    input_summary: z.string(),
    projected_modifications: z.array(z.string()).nullable(),
    command_summary: z.string().nullable(),
    expires_at: isoDatetime,
  }),
  sensitivity: 'private',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'tool.called (the call is paused awaiting the user)',
  description: 'A tool with side effects is paused until the user allows or denies it.',
});

export const toolConfirmationResolved = defineEventType({
  type: 'tool.confirmation_resolved',
  domain: 'tool',
  schema: z.strictObject({
    tool_use_id: z.string().min(1),
    confirmation_request_id: z.string().min(1),
    decision: z.enum(['allow', 'deny', 'timeout']),
    scope: z.enum(['once', 'session']).nullable(),
    responding_client_attach_token: z.string().nullable(),
  }),
  sensitivity: 'private',
  actors: ['user'],
  phase: '1',
  audit: true,
  parent: 'tool.confirmation_requested',
  description: 'The user allowed or denied a paused tool call, or the request timed out.',
});

export const toolEvents = [
  toolCalled,
  toolCompleted,
  toolFailed,
  toolInputInvalid,
  toolConfirmationRequested,
  toolConfirmationResolved,
];
