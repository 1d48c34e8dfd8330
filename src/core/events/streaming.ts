import { z } from 'zod';
import { ContentBlockSchema, UsageSchema } from './content.js';
import { defineStreamingType, nonNegativeInt, type StreamingEntry } from './define.js';

/*
 * The streaming-only family (streaming spec §5.3): live deltas from the agent loop to attached clients.
 * Never on the bus, never persisted; the authoritative state is `message.complete` plus the persisted
 * `llm.call_completed`. Everything but `message.start` carries model output, hence `private`.
 */

const messageId = z.string().min(1);
const blockIndex = nonNegativeInt;

export const messageStart = defineStreamingType({
  type: 'message.start',
  domain: 'message',
  schema: z.strictObject({
    message_id: messageId,
    role: z.literal('assistant'),
    model: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['agent'],
  description: 'The model began streaming an assistant message.',
});

export const textDelta = defineStreamingType({
  type: 'text.delta',
  domain: 'text',
  schema: z.strictObject({
    message_id: messageId,
    content_block_index: blockIndex,
    text: z.string(),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'A new chunk of text for one content block (not cumulative).',
});

export const thinkingDelta = defineStreamingType({
  type: 'thinking.delta',
  domain: 'thinking',
  schema: z.strictObject({
    message_id: messageId,
    content_block_index: blockIndex,
    text: z.string(),
    signature: z.string().nullable(),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'A chunk of thinking text; the signature arrives on the final delta of the block.',
});

export const toolUseStart = defineStreamingType({
  type: 'tool.use_start',
  domain: 'tool',
  schema: z.strictObject({
    message_id: messageId,
    content_block_index: blockIndex,
    tool_use_id: z.string().min(1),
    tool_name: z.string().min(1),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'The model began a tool_use block.',
});

export const toolUseInputDelta = defineStreamingType({
  type: 'tool.use_input_delta',
  domain: 'tool',
  schema: z.strictObject({
    message_id: messageId,
    content_block_index: blockIndex,
    tool_use_id: z.string().min(1),
    partial_json: z.string(),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'A raw JSON fragment of a tool input; not parseable until tool.use_end.',
});

export const toolUseEnd = defineStreamingType({
  type: 'tool.use_end',
  domain: 'tool',
  schema: z.strictObject({
    message_id: messageId,
    content_block_index: blockIndex,
    tool_use_id: z.string().min(1),
    final_input: z.record(z.string(), z.unknown()),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'A tool_use block ended; final_input is the authoritative parsed input.',
});

export const messageComplete = defineStreamingType({
  type: 'message.complete',
  domain: 'message',
  schema: z.strictObject({
    message_id: messageId,
    // §5.3 lists four reasons; `cancelled` comes from §6.2.1 and also ends a message a failed model
    // call cut short, which then carries the call's `error_class` (docs/decisions.md "A failed call's
    // message").
    stop_reason: z.enum(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'cancelled']),
    final_content: z.array(ContentBlockSchema),
    usage: UsageSchema,
    /** Additive: only on a message cut by a failed call, the `llm.call_failed.error_class` that follows. */
    error_class: z.string().min(1).max(100).optional(),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  description: 'The assistant message ended; final_content and usage are authoritative.',
});

export const STREAMING_ENTRIES: readonly StreamingEntry[] = [
  messageStart,
  textDelta,
  thinkingDelta,
  toolUseStart,
  toolUseInputDelta,
  toolUseEnd,
  messageComplete,
];

export const STREAMING: ReadonlyMap<string, StreamingEntry> = new Map(
  STREAMING_ENTRIES.map((e) => [e.type, e]),
);

export const STREAMING_TYPES: ReadonlySet<string> = new Set(STREAMING_ENTRIES.map((e) => e.type));

/** Name prefixes reserved for the streaming family; catalog types must not use them (bus spec §4.5.1). */
export const RESERVED_STREAMING_PREFIXES: readonly string[] = ['message.', 'text.', 'thinking.', 'tool.use_'];
