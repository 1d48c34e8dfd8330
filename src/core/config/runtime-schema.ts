import { z } from 'zod';

const modelId = z.string().regex(/^[a-z0-9-]+:[^\s]+$/, 'must be "provider:name", e.g. scripted:demo');

/** Price of a model in USD per million tokens. */
export const PriceSchema = z.strictObject({
  input_per_mtok: z.number().nonnegative(),
  output_per_mtok: z.number().nonnegative(),
  cached_input_per_mtok: z.number().nonnegative().default(0),
  cache_creation_per_mtok: z.number().nonnegative().default(0),
});

export const RoutingRuleSchema = z.strictObject({
  name: z.string().min(1),
  /** Case-insensitive regular expression matched against the user's message text. */
  match: z
    .string()
    .min(1)
    .refine((source) => {
      try {
        new RegExp(source, 'i');
        return true;
      } catch {
        return false;
      }
    }, 'must be a valid regular expression'),
  model: modelId,
});

export const ConfirmationPolicySchema = z.enum(['ask', 'allow', 'deny']);

/** Settings of the agent runtime; part of the one config schema. */
export const RuntimeConfigSchema = z.strictObject({
  default_model: modelId.default('scripted:demo'),
  /** Per-workspace default models, keyed by absolute workspace path. */
  workspace_models: z.record(z.string(), modelId).default({}),
  routing_rules: z.array(RoutingRuleSchema).default([]),
  worker_tiers: z
    .strictObject({ fast: modelId, balanced: modelId, deep: modelId })
    .default({ fast: 'scripted:fast', balanced: 'scripted:balanced', deep: 'scripted:deep' }),
  pricing_version: z.string().min(1).default('2026-11-01'),
  /** Prices keyed by `provider:name`, or by `provider:*` for every model of a provider. */
  pricing: z.record(z.string(), PriceSchema).default({
    'scripted:*': {
      input_per_mtok: 1,
      output_per_mtok: 2,
      cached_input_per_mtok: 0,
      cache_creation_per_mtok: 0,
    },
  }),
  tool_confirmation: z
    .strictObject({
      write: ConfirmationPolicySchema,
      execute: ConfirmationPolicySchema,
      network: ConfirmationPolicySchema,
    })
    .default({ write: 'ask', execute: 'ask', network: 'ask' }),
  confirmation_timeout_ms: z.number().int().positive().default(300_000),
  turn_timeout_ms: z.number().int().positive().default(600_000),
  inactivity_timeout_ms: z
    .number()
    .int()
    .positive()
    .default(24 * 3600 * 1000),
  shell_timeout_ms: z.number().int().positive().default(120_000),
  scripted: z
    .strictObject({
      token_delay_ms: z.number().int().nonnegative().default(15),
      slow_token_delay_ms: z.number().int().nonnegative().default(25),
      slow_tokens: z.number().int().positive().default(400),
    })
    .default({ token_delay_ms: 15, slow_token_delay_ms: 25, slow_tokens: 400 }),
});

export type RuntimeConfig = z.output<typeof RuntimeConfigSchema>;
export type RuntimeConfigInput = z.input<typeof RuntimeConfigSchema>;

export function runtimeConfig(input: RuntimeConfigInput = {}): RuntimeConfig {
  return RuntimeConfigSchema.parse(input);
}
