import type { RuntimeConfig } from '../../config/runtime-schema.js';
import type { ModelAdapter, ModelValidationFailure } from '../model-adapter.js';
import type { ProviderHealth } from '../provider-health.js';
import { registerConfiguredProviders } from './providers.js';
import { ScriptedModel } from './scripted.js';

export type ModelResolution =
  | { readonly ok: true; readonly adapter: ModelAdapter }
  | { readonly ok: false; readonly failure: ModelValidationFailure; readonly detail?: string | null };

/**
 * Maps canonical model ids (`provider:name`) to adapters. `scripted:*` is always available; the
 * configured providers (`anthropic`, `openai` and the `providers` entries, docs/providers.md) are
 * registered by `registerConfiguredProviders`; others can register their own factories.
 */
export class ModelRegistry {
  private readonly factories = new Map<string, (model: string) => ModelAdapter>();
  private readonly unavailable = new Set<string>();
  /** What the calls made so far say of each provider's health: an outage makes routing reject it. */
  health: ProviderHealth | null = null;

  constructor(config: RuntimeConfig) {
    registerConfiguredProviders(this, config);
    const scripted = new ScriptedModel({
      tokenDelayMs: config.scripted.token_delay_ms,
      slowTokenDelayMs: config.scripted.slow_token_delay_ms,
      slowTokens: config.scripted.slow_tokens,
    });
    this.register('scripted', () => scripted);
  }

  register(provider: string, factory: (model: string) => ModelAdapter): void {
    this.factories.set(provider, factory);
  }

  /** Marks a provider as down (routing then rejects it with `provider_unavailable`). */
  setAvailable(provider: string, available: boolean): void {
    if (available) this.unavailable.delete(provider);
    else this.unavailable.add(provider);
  }

  resolve(model: string): ModelResolution {
    const provider = model.slice(0, model.indexOf(':'));
    const factory = this.factories.get(provider);
    if (factory === undefined) {
      return {
        ok: false,
        failure: 'not_configured',
        detail: `no provider "${provider}" in the config (providers: ${[...this.factories.keys()].join(', ')})`,
      };
    }
    if (this.unavailable.has(provider)) return { ok: false, failure: 'provider_unavailable' };
    const outage = this.health?.unroutable(model) ?? null;
    if (outage !== null) return { ok: false, failure: 'provider_unavailable', detail: outage };
    const adapter = factory(model);
    const failure = adapter.validate?.(model) ?? null;
    return failure === null
      ? { ok: true, adapter }
      : { ok: false, failure, detail: adapter.explain?.(model) ?? null };
  }
}
