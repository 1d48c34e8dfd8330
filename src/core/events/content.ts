import { z } from 'zod';
import { nonNegativeInt, nonNegativeNumber } from './define.js';

/**
 * One block of a canonical message (canonical message format), as carried by
 * `message.complete.final_content` (streaming spec §5.3). Mirrors `ContentBlock` in the model adapter.
 */
export const ContentBlockSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text'), text: z.string() }),
  z.strictObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().nullable() }),
  z.strictObject({ type: z.literal('redacted_thinking'), data: z.string() }),
  z.strictObject({
    type: z.literal('tool_use'),
    id: z.string().min(1),
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown()),
  }),
  z.strictObject({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1),
    content: z.string(),
    is_error: z.boolean(),
  }),
]);
export type ContentBlockPayload = z.infer<typeof ContentBlockSchema>;

/** Finalized token counts and cost of one model call (`message.complete.usage`). */
export const UsageSchema = z.strictObject({
  input_tokens: nonNegativeInt,
  output_tokens: nonNegativeInt,
  cached_input_tokens: nonNegativeInt,
  cache_creation_input_tokens: nonNegativeInt,
  cost_usd: nonNegativeNumber,
  pricing_version: z.string(),
});
export type UsagePayload = z.infer<typeof UsageSchema>;
