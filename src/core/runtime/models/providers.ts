import { BUILT_IN_PROVIDERS, type RuntimeConfig } from '../../config/runtime-schema.js';
import type { ModelAdapter } from '../model-adapter.js';
import { AnthropicAdapter } from './anthropic.js';
import { OpenAIAdapter } from './openai.js';

/** A provider entry with built-in defaults applied and its key looked up (never logged). */
export interface ResolvedProvider {
  readonly name: string;
  readonly kind: 'anthropic' | 'openai-compatible';
  readonly baseUrl: string | undefined;
  readonly apiKey: string | null;
  /** Unusable without a key: Anthropic, and OpenAI-compatible entries that name a key variable. */
  readonly requiresKey: boolean;
  readonly maxRetries: number | undefined;
  readonly maxTokens: number | undefined;
  readonly thinkingBudgetTokens: number | undefined;
  /** Where the key comes from, as a user would fix it (`$OPENAI_API_KEY`), or null when none is needed. */
  readonly keySource: string | null;
}

/**
 * The providers in effect: the built-in `anthropic` and `openai` entries, each merged with the
 * configured entry of the same name, plus every other configured entry. A key comes from `api_key`,
 * else from the environment variable `api_key_env` names; an OpenAI-compatible entry with neither
 * (a local server) needs none.
 */
export function resolveProviders(
  config: Pick<RuntimeConfig, 'providers'>,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedProvider[] {
  const names = [...new Set([...Object.keys(BUILT_IN_PROVIDERS), ...Object.keys(config.providers)])];
  return names.map((name) => {
    const entry = { ...BUILT_IN_PROVIDERS[name], ...config.providers[name] };
    const kind = entry.kind ?? 'openai-compatible';
    const fromEnv = entry.api_key_env !== undefined ? env[entry.api_key_env] : undefined;
    const apiKey = entry.api_key ?? (fromEnv !== undefined && fromEnv.trim() !== '' ? fromEnv.trim() : null);
    return {
      name,
      kind,
      baseUrl: entry.base_url,
      apiKey,
      requiresKey: kind === 'anthropic' || entry.api_key !== undefined || entry.api_key_env !== undefined,
      maxRetries: entry.max_retries,
      maxTokens: entry.max_tokens,
      thinkingBudgetTokens: entry.thinking_budget_tokens,
      keySource:
        entry.api_key !== undefined
          ? `providers.${name}.api_key in the config`
          : entry.api_key_env !== undefined
            ? `$${entry.api_key_env}`
            : null,
    };
  });
}

/** The adapter of one resolved provider. */
export function createProviderAdapter(provider: ResolvedProvider): ModelAdapter {
  if (provider.kind === 'anthropic') {
    return new AnthropicAdapter({
      provider: provider.name,
      apiKey: provider.apiKey,
      keySource: provider.keySource,
      ...(provider.baseUrl !== undefined ? { baseUrl: provider.baseUrl } : {}),
      ...(provider.maxRetries !== undefined ? { maxRetries: provider.maxRetries } : {}),
      ...(provider.maxTokens !== undefined ? { maxTokens: provider.maxTokens } : {}),
      ...(provider.thinkingBudgetTokens !== undefined
        ? { thinkingBudgetTokens: provider.thinkingBudgetTokens }
        : {}),
    });
  }
  return new OpenAIAdapter({
    provider: provider.name,
    apiKey: provider.apiKey,
    keySource: provider.keySource,
    requiresKey: provider.requiresKey,
    organizationFromEnv: provider.name === 'openai' && provider.baseUrl === undefined,
    ...(provider.baseUrl !== undefined ? { baseUrl: provider.baseUrl } : {}),
    ...(provider.maxRetries !== undefined ? { maxRetries: provider.maxRetries } : {}),
    ...(provider.maxTokens !== undefined ? { maxTokens: provider.maxTokens } : {}),
  });
}

/**
 * Registers every configured provider with the model registry, so `anthropic:<model>`,
 * `openai:<model>` and `<name>:<model>` of each configured entry resolve. A provider without its key
 * is registered all the same: its adapter's `validate()` answers `not_configured`, so routing reports
 * the candidate `rejected` and falls through to the next policy. Adapters are created lazily, once.
 */
export function registerConfiguredProviders(
  registry: { register(provider: string, factory: (model: string) => ModelAdapter): void },
  config: Pick<RuntimeConfig, 'providers'>,
  env: NodeJS.ProcessEnv = process.env,
): void {
  for (const provider of resolveProviders(config, env)) {
    let adapter: ModelAdapter | null = null;
    registry.register(provider.name, () => {
      adapter ??= createProviderAdapter(provider);
      return adapter;
    });
  }
}
