import { z } from 'zod';

const Usd = z.string().regex(/^\d+(\.\d+)?$/, {
  error: 'must be an amount in USD written as a decimal string, e.g. "5" or "0.25"',
});

/** Daily and monthly caps of one user or team (either may be left out). */
const CapsSchema = z.strictObject({
  daily_usd: Usd.optional(),
  monthly_usd: Usd.optional(),
});

/**
 * The gateway (docs/gateway.md): the OpenAI- and Anthropic-compatible routes under `/v1` that any SDK
 * can point at with a gateway key.
 */
export const GatewayConfigSchema = z.strictObject({
  /** Serve `/v1/*`. Without any key in the keystore every request is refused anyway. */
  enabled: z.boolean().default(true),
  /** The keystore file; default `$METIS_HOME/gateway-keys.json`. */
  keystore: z.string().min(1).nullable().default(null),
  /** Percentages of a cap at which `quota.alert` is emitted, once per window each. */
  alert_thresholds_pct: z
    .array(z.number().positive().max(1000))
    .min(1)
    .default([80, 100])
    .transform((list) => [...new Set(list)].sort((a, b) => a - b)),
  /** Caps per user id (`--user` of issue-key), over every key of that user. */
  users: z.record(z.string(), CapsSchema).default({}),
  /** Caps per team id (`--team`), over every key of that team. */
  teams: z.record(z.string(), CapsSchema).default({}),
  /**
   * A provider's own model names an app sends (`gpt-4.1-mini`, `claude-sonnet-4-6`) mapped to metis models
   * (`openai:gpt-4.1-mini`, `scripted:demo`). A name that is neither here nor a metis id goes to the router.
   */
  model_aliases: z.record(z.string(), z.string().regex(/^[a-z0-9][a-z0-9_-]*:.+$/)).default({}),
});

export type GatewayConfig = z.output<typeof GatewayConfigSchema>;
export type GatewayConfigInput = z.input<typeof GatewayConfigSchema>;
