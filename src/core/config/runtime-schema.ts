import { z } from 'zod';
import { compileRoutingPattern } from './routing-pattern.js';

const modelId = z.string().regex(/^[a-z0-9-]+:[^\s]+$/, 'must be "provider:name", e.g. scripted:demo');

/** Price of a model in USD per million tokens. */
export const PriceSchema = z.strictObject({
  input_per_mtok: z.number().nonnegative(),
  output_per_mtok: z.number().nonnegative(),
  cached_input_per_mtok: z.number().nonnegative().default(0),
  cache_creation_per_mtok: z.number().nonnegative().default(0),
});

/** Caps on spend (issue 31 budgets): USD as the pricing table bills it, and tokens; null is no cap. */
export const BudgetCapsSchema = z.strictObject({
  usd: z.number().nonnegative().nullable().default(null),
  tokens: z.number().int().nonnegative().nullable().default(null),
});
export type BudgetCaps = z.output<typeof BudgetCapsSchema>;

export const RoutingRuleSchema = z.strictObject({
  name: z.string().min(1),
  /**
   * Case-insensitive regular expression matched against the user's message text, run by a linear-time
   * engine (routing-pattern.ts): a pattern that could not be is refused here, at config load.
   */
  match: z
    .string()
    .min(1)
    .superRefine((source, ctx) => {
      const compiled = compileRoutingPattern(source);
      if (!compiled.ok)
        ctx.addIssue({ code: 'custom', message: `pattern ${JSON.stringify(source)} ${compiled.reason}` });
    }),
  model: modelId,
});

export type RoutingRule = z.output<typeof RoutingRuleSchema>;

/**
 * One model provider (docs/providers.md). `kind` picks the SDK; `anthropic` and `openai` are built in
 * (see BUILT_IN_PROVIDERS) and may be configured without it. The key is read from the environment
 * variable named by `api_key_env`, or given as `api_key` (which wins); it is never logged.
 */
export const ProviderConfigSchema = z.strictObject({
  kind: z.enum(['anthropic', 'openai-compatible']).optional(),
  /** API base URL; for OpenAI-compatible servers it includes the `/v1` path, e.g. `http://localhost:11434/v1`. */
  base_url: z.url({ protocol: /^https?$/ }).optional(),
  /** Name of the environment variable that holds the key (e.g. `ANTHROPIC_API_KEY`). */
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be the name of an environment variable')
    .optional(),
  /** The key itself; prefer `api_key_env` so the key stays out of config files. */
  api_key: z.string().min(1).optional(),
  /** Retries of a failed call before its first token (rate limit, server error, network). Default 2. */
  max_retries: z.number().int().nonnegative().max(10).optional(),
  /** `max_tokens` sent with each request when the loop gives none. Default 8192. */
  max_tokens: z.number().int().positive().optional(),
  /** Anthropic only: extended thinking with this budget (at least 1024); `max_tokens` is raised above it. */
  thinking_budget_tokens: z.number().int().min(1024).optional(),
});

/** Providers that exist without configuration; an entry of the same name is merged over them. */
export const BUILT_IN_PROVIDERS: Readonly<Record<string, z.output<typeof ProviderConfigSchema>>> = {
  anthropic: { kind: 'anthropic', api_key_env: 'ANTHROPIC_API_KEY' },
  openai: { kind: 'openai-compatible', api_key_env: 'OPENAI_API_KEY' },
};

const providerName = z.string().regex(/^[a-z0-9-]+$/, 'must be a provider name as in "provider:model"');

export const ConfirmationPolicySchema = z.enum(['ask', 'allow', 'deny']);

/** Settings of the agent runtime; part of the one config schema. */
export const RuntimeConfigSchema = z.strictObject({
  default_model: modelId.default('scripted:demo'),
  /** Per-workspace default models, keyed by absolute workspace path. */
  workspace_models: z.record(z.string(), modelId).default({}),
  routing_rules: z.array(RoutingRuleSchema).default([]),
  /**
   * The routing rules from their own file (YAML or JSON: `rules: [...]`), re-read when it changes;
   * `routing_rules` apply until it first loads (runtime/routing-policy.ts).
   */
  routing_policy_file: z.string().min(1).nullable().default(null),
  /** How often the policy file is checked for changes. */
  routing_policy_poll_ms: z.number().int().min(10).max(60_000).default(1_000),
  /**
   * Every field has its own default and the object is prefaulted with `{}`, so a partial object (one
   * tier only) is merged over the defaults; unknown keys are still errors.
   */
  worker_tiers: z
    .strictObject({
      fast: modelId.default('scripted:fast'),
      balanced: modelId.default('scripted:balanced'),
      deep: modelId.default('scripted:deep'),
    })
    .prefault({}),
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
  /**
   * Model providers keyed by the provider part of `provider:name`; `anthropic` and `openai` are built
   * in (keys from ANTHROPIC_API_KEY and OPENAI_API_KEY), so `{ ollama: { kind: 'openai-compatible',
   * base_url: 'http://localhost:11434/v1' } }` adds `ollama:*` models.
   */
  providers: z
    .record(providerName, ProviderConfigSchema)
    .default({})
    .superRefine((providers, ctx) => {
      for (const [name, entry] of Object.entries(providers)) {
        if (name === 'scripted') {
          ctx.addIssue({ code: 'custom', path: [name], message: '"scripted" is the built-in model' });
        } else if (entry.kind === undefined && BUILT_IN_PROVIDERS[name] === undefined) {
          ctx.addIssue({
            code: 'custom',
            path: [name, 'kind'],
            message: 'must be "anthropic" or "openai-compatible"',
          });
        }
      }
    }),
  /** Per-field defaults and `prefault({})`, as for `worker_tiers`: `{ execute: 'allow' }` alone is valid. */
  tool_confirmation: z
    .strictObject({
      write: ConfirmationPolicySchema.default('ask'),
      execute: ConfirmationPolicySchema.default('ask'),
      network: ConfirmationPolicySchema.default('ask'),
    })
    .prefault({}),
  /**
   * Reading a file whose real path (symlinks resolved) is outside the session's workspace: `ask` the
   * user, `deny` (the call fails with permission_denied), or `allow`. Files that may hold secrets ask
   * whatever this says, except that `deny` still denies outside (docs/configuration.md).
   */
  outside_workspace: ConfirmationPolicySchema.default('ask'),
  /** More globs of files that always ask before a read (added to the built-in list of secrets files). */
  secret_paths: z.array(z.string().min(1).max(1000)).default([]),
  confirmation_timeout_ms: z.number().int().positive().default(300_000),
  turn_timeout_ms: z.number().int().positive().default(600_000),
  inactivity_timeout_ms: z
    .number()
    .int()
    .positive()
    .default(24 * 3600 * 1000),
  shell_timeout_ms: z.number().int().positive().default(120_000),
  /**
   * A turn a crash or a stop cut: `resume` takes it up at the next start, `fail` ends it as failed
   * (docs/runtime.md "Durable turns").
   */
  on_restart: z.enum(['resume', 'fail']).default('resume'),
  /** Restarts one turn is resumed across; at the next it ends failed (`resumption_cap_reached`). */
  max_resumptions: z.number().int().nonnegative().default(3),
  /** When a provider or model stops being routed to, and when it is tried again (docs/configuration.md). */
  provider_health: z
    .strictObject({
      degraded_failures: z.number().int().positive().default(3),
      window_seconds: z.number().int().positive().default(60),
      consecutive_failures: z.number().int().positive().default(5),
      failing_models: z.number().int().min(2).default(2),
      cooldown_seconds: z.number().nonnegative().default(30),
    })
    .prefault({}),
  /** The heuristic evaluator: scores turns and sessions at session end and on explicit feedback. */
  evaluator: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** A model that grades instead of the heuristics (an LLM judge); null: the heuristic judge. */
      judge_model: modelId.nullable().default(null),
    })
    .prefault({}),
  /** Pattern routing (slot 4 of the routing chain): what similar turns did on other models. */
  patterns: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** Outcomes a model needs on a fingerprint before it is compared (both sides of a comparison). */
      min_samples: z.number().int().positive().default(3),
      /** Score gain that makes another model better (scores are in [0, 1]). */
      min_score_gain: z.number().min(0).max(1).default(0.1),
      /** Cost saving (fraction) that makes another model better at an equal score. */
      min_cost_saving: z.number().min(0).max(1).default(0.2),
      /** Newest outcomes of a fingerprint considered (the spec's K). */
      neighbors: z.number().int().positive().default(50),
      /** Outcome rows above which each write says so (`pattern.evicted` soft_cap_signal). */
      soft_cap_rows: z.number().int().positive().default(50_000),
      /** Outcome rows above which the oldest are removed (`pattern.evicted` hard_cap_evict). */
      hard_cap_rows: z.number().int().positive().default(100_000),
      /** Outcomes older than this are trimmed (`pattern.evicted` age_trim). */
      max_age_days: z.number().positive().default(90),
    })
    .refine((p) => p.hard_cap_rows >= p.soft_cap_rows, {
      message: 'hard_cap_rows must be at least soft_cap_rows',
      path: ['hard_cap_rows'],
    })
    .prefault({}),
  /** Workspace memory, `.metis/MEMORY.md` and `.metis/USER.md` (docs/memory.md). */
  memory: z
    .strictObject({
      /** Most bytes each memory file may hold: past it the oldest entries are dropped. */
      max_bytes: z.number().int().min(256).max(1_048_576).default(4096),
    })
    .prefault({}),
  /** Skills, `$METIS_HOME/skills` and `<workspace>/.metis/skills` (docs/skills.md). */
  skills: z
    .strictObject({
      /** Most tokens of skills one session may load, `always` ones included: a load past it fails. */
      budget_tokens: z.number().int().min(0).max(1_000_000).default(8000),
      /** The global skills folder; default `$METIS_HOME/skills`. */
      global_dir: z.string().min(1).nullable().default(null),
    })
    .prefault({}),
  /**
   * Budgets that pause (issue 31): `session` caps each session's own spend, `tree` a session's and every
   * worker's under it. At a cap a turn waits before its next model call until the cap is raised.
   */
  budgets: z
    .strictObject({ session: BudgetCapsSchema.prefault({}), tree: BudgetCapsSchema.prefault({}) })
    .prefault({}),
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
