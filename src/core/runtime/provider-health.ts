import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { EventType, PayloadOf } from '../events/catalog/index.js';
import type { MetisEvent } from '../events/envelope.js';

export interface ProviderHealthOptions {
  /** Failures of one provider within `window_seconds` that mark it degraded (soft, `provider.degraded`). */
  readonly degraded_failures: number;
  readonly window_seconds: number;
  /** Consecutive failures of one model that make it unroutable (bus §6.4 "5_consecutive_failures"). */
  readonly consecutive_failures: number;
  /** Models of one provider failing at once that make the whole provider unroutable. */
  readonly failing_models: number;
  /** How long an unroutable provider or model waits before one call may probe it again. */
  readonly cooldown_seconds: number;
}

export const DEFAULT_PROVIDER_HEALTH: ProviderHealthOptions = {
  degraded_failures: 3,
  window_seconds: 60,
  consecutive_failures: 5,
  failing_models: 2,
  cooldown_seconds: 30,
};

/**
 * Classes that say something about the provider. A cancel, a request the model refused (too long,
 * invalid) and `other` (what a crash or a cut turn records) say nothing about its health.
 */
const HEALTH_CLASSES = new Set(['rate_limit', 'server_error', 'network', 'auth']);
const DNS_FAILURE = /ENOTFOUND|EAI_AGAIN|getaddrinfo/i;

interface Outage {
  readonly scope: 'model_specific' | 'provider_wide';
  readonly models: string[];
  readonly sinceMs: number;
  /** When a call may probe again; a probe in flight pushes it out by a cool-down. */
  retryAtMs: number;
  readonly reason: string;
}

/**
 * Provider health from the calls the runtime makes (bus §6.4): `provider.degraded` when a provider fails
 * often, `routing.provider_unavailable` on a hard trigger (consecutive failures of a model, an auth or
 * DNS error, several models failing), after which routing rejects it until, after a cool-down, one call
 * is let through as a probe: its success is `routing.provider_recovered`, its failure another cool-down.
 */
export class ProviderHealth {
  private readonly consecutive = new Map<string, number>();
  private readonly recentFailures = new Map<string, number[]>();
  private readonly degraded = new Set<string>();
  /** Keyed by provider (provider-wide) or by model id (model-specific). */
  private readonly outages = new Map<string, Outage>();
  private handle: SubscriptionHandle | null = null;
  private bus: EventBus | null = null;

  constructor(
    private readonly options: ProviderHealthOptions = DEFAULT_PROVIDER_HEALTH,
    private readonly now: () => number = Date.now,
  ) {}

  attach(bus: EventBus): void {
    this.bus = bus;
    this.handle = bus.subscribe({
      name: 'provider-health',
      fastPath: true,
      filter: { event_types: ['llm.call_started', 'llm.call_failed', 'llm.call_completed'] },
      handler: (event) => this.observe(event),
    });
  }

  detach(bus: EventBus): void {
    if (this.handle !== null) bus.unsubscribe(this.handle, 'shutdown');
    this.handle = null;
  }

  /**
   * Why routing must reject the model now, or null when it may be called. Once a cool-down is over calls
   * are let through again; the first to start is the probe, and the cool-down starts again for the
   * others until it answers. Asking changes nothing (a turn resolves its model more than once).
   */
  unroutable(model: string): string | null {
    const provider = model.slice(0, model.indexOf(':'));
    const now = this.now();
    for (const key of [provider, model]) {
      const outage = this.outages.get(key);
      if (outage === undefined || now >= outage.retryAtMs) continue;
      return `${key} is unavailable (${outage.reason}); next probe in ${Math.ceil((outage.retryAtMs - now) / 1000)} s`;
    }
    return null;
  }

  private observe(event: MetisEvent): void {
    const model = String(event.payload.model);
    const provider = String(event.payload.provider);
    if (event.type === 'llm.call_started') this.probing(provider, model);
    else if (event.type === 'llm.call_completed') this.succeeded(event, provider, model);
    else this.failed(event, provider, model);
  }

  private failed(event: MetisEvent, provider: string, model: string): void {
    const errorClass = String(event.payload.error_class);
    if (!HEALTH_CLASSES.has(errorClass)) return;
    const count = (this.consecutive.get(model) ?? 0) + 1;
    this.consecutive.set(model, count);
    this.noteRecent(event, provider);
    const outage = this.outages.get(provider) ?? this.outages.get(model);
    if (outage !== undefined) {
      // A probe failed: wait a whole cool-down again, no second announcement.
      outage.retryAtMs = this.now() + this.options.cooldown_seconds * 1000;
      return;
    }
    const trigger = this.triggerOf(event, errorClass, provider, model, count);
    if (trigger !== null) this.unavailable(event, trigger.key, trigger.scope, trigger.reason);
  }

  /** The hard trigger of bus §6.4 this failure crosses, if any. */
  private triggerOf(
    event: MetisEvent,
    errorClass: string,
    provider: string,
    model: string,
    count: number,
  ): { key: string; scope: Outage['scope']; reason: string } | null {
    if (errorClass === 'auth') return { key: provider, scope: 'provider_wide', reason: 'auth_error' };
    if (errorClass === 'network' && DNS_FAILURE.test(String(event.payload.error_message_redacted)))
      return { key: provider, scope: 'provider_wide', reason: 'dns_error' };
    const failingModels = [...this.consecutive].filter(
      ([id, n]) => id.startsWith(`${provider}:`) && n >= Math.min(3, this.options.consecutive_failures),
    );
    if (failingModels.length >= this.options.failing_models)
      return { key: provider, scope: 'provider_wide', reason: 'multi_model_failures' };
    if (count >= this.options.consecutive_failures)
      return {
        key: model,
        scope: 'model_specific',
        reason: `${this.options.consecutive_failures}_consecutive_failures`,
      };
    return null;
  }

  /** A call started on a provider or model in an outage: the probe; the others wait a cool-down more. */
  private probing(provider: string, model: string): void {
    const now = this.now();
    for (const key of [provider, model]) {
      const outage = this.outages.get(key);
      if (outage !== undefined && now >= outage.retryAtMs)
        outage.retryAtMs = now + this.options.cooldown_seconds * 1000;
    }
  }

  private noteRecent(event: MetisEvent, provider: string): void {
    const now = this.now();
    const windowMs = this.options.window_seconds * 1000;
    const recent = (this.recentFailures.get(provider) ?? []).filter((at) => now - at < windowMs);
    recent.push(now);
    this.recentFailures.set(provider, recent);
    if (recent.length >= this.options.degraded_failures && !this.degraded.has(provider)) {
      this.degraded.add(provider);
      this.emit(event, 'provider.degraded', event.id, {
        provider,
        recent_failure_count: recent.length,
        window_seconds: this.options.window_seconds,
      });
    }
  }

  private unavailable(event: MetisEvent, key: string, scope: Outage['scope'], reason: string): void {
    const provider = String(event.payload.provider);
    const models =
      scope === 'model_specific'
        ? [key]
        : [...new Set([...this.consecutive.keys()].filter((id) => id.startsWith(`${provider}:`)))];
    const now = this.now();
    this.outages.set(key, {
      scope,
      models,
      sinceMs: now,
      retryAtMs: now + this.options.cooldown_seconds * 1000,
      reason,
    });
    this.emit(event, 'routing.provider_unavailable', event.id, {
      provider,
      scope,
      models_affected: models,
      trigger_reason: reason,
    });
  }

  private succeeded(event: MetisEvent, provider: string, model: string): void {
    this.consecutive.delete(model);
    this.degraded.delete(provider);
    this.recentFailures.delete(provider);
    for (const key of [provider, model]) {
      const outage = this.outages.get(key);
      if (outage === undefined) continue;
      this.outages.delete(key);
      if (outage.scope === 'provider_wide') for (const id of outage.models) this.consecutive.delete(id);
      this.emit(event, 'routing.provider_recovered', null, {
        provider,
        scope: outage.scope,
        models_recovered: outage.models,
        downtime_seconds: Math.max(0, (this.now() - outage.sinceMs) / 1000),
      });
    }
  }

  /**
   * In the session of the call that caused it, so its clients see why routing changes; outside any turn
   * (turn_id null): it is about the provider, and it comes after the turn's own events.
   */
  private emit<T extends EventType>(
    cause: MetisEvent,
    type: T,
    parent: string | null,
    payload: PayloadOf<T>,
  ): void {
    this.bus?.emit({
      type,
      session_id: cause.session_id,
      turn_id: null,
      parent_event_id: parent,
      actor: 'system',
      payload,
    });
  }
}
