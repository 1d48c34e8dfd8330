import type { GatewayConfig } from '../config/gateway-schema.js';
import type { PayloadOf } from '../events/catalog/index.js';
import { usdDecimal } from '../runtime/pricing.js';
import type { GatewaySpendRow } from '../store/gateway-spend.js';
import type { StoredKey } from './keystore.js';

export type QuotaWindow = 'daily' | 'monthly';

/** Whose spend a cap bounds: one key, every key of a user, every key of a team. */
interface Scope {
  readonly id: string;
  readonly keyId: string | null;
  readonly userId: string | null;
  readonly caps: Readonly<Record<QuotaWindow, number | null>>;
}

/** A cap reached: the request is refused with a 429 until the window turns. */
export interface QuotaRefusal {
  readonly window: QuotaWindow;
  readonly capUsd: number;
  readonly spentUsd: number;
  readonly retryAfterSeconds: number;
  /** The scope: `key:…`, `user:…` or `team:…`. */
  readonly scope: string;
}

interface Spend {
  period: Record<QuotaWindow, string>;
  usd: Record<QuotaWindow, number>;
}

/** One of this node's calls that the store of record may not hold yet (shared spend only). */
interface PendingCall {
  readonly eventId: string;
  readonly scopes: readonly string[];
  readonly day: string;
  readonly costUsd: number;
}

/**
 * Daily and monthly spend caps of gateway keys, and of users and teams over all their keys (config
 * `gateway.users`, `gateway.teams`). Spend is the `cost_usd` of the gateway's `llm.call_completed`
 * events: counted from the store once at start (`seed`, this month's calls), then added as calls
 * complete, so it is exact across restarts. Windows are UTC days and months. `quota.alert` fires when a
 * call's cost carries the spend across a threshold, so a restart above a threshold does not repeat it.
 *
 * Shared by several nodes (a PostgreSQL store): `refresh` replaces the counted spend with the store's
 * (every node's calls) and keeps this node's calls the store does not hold yet on top, each counted
 * once; between two refreshes the other nodes' newest calls are not counted yet.
 */
export class QuotaBook {
  private spend = new Map<string, Spend>();
  private pending: PendingCall[] = [];

  constructor(
    private readonly config: GatewayConfig,
    /** Several nodes count into one store: this node's calls wait in `pending` until it holds them. */
    private readonly shared = false,
  ) {}

  /** The start of this UTC month, in microseconds: where `seed`'s rows must begin. */
  static monthStartUs(now = new Date()): number {
    return Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) * 1000;
  }

  /** The store's spend (replacing what was counted from it before), and which pending calls it holds. */
  refresh(rows: readonly GatewaySpendRow[], present: ReadonlySet<string>, now = new Date()): void {
    this.spend = new Map();
    this.seed(rows, now);
    this.pending = this.pending.filter((call) => !present.has(call.eventId));
  }

  /** Ids of this node's calls the store was not seen to hold yet. */
  pendingIds(): string[] {
    return this.pending.map((call) => call.eventId);
  }

  seed(rows: readonly GatewaySpendRow[], now = new Date()): void {
    const today = dayOf(now);
    for (const row of rows) {
      const cost = Number(row.cost_usd);
      if (!Number.isFinite(cost) || cost <= 0) continue;
      const day = dayOf(new Date(row.timestamp_us / 1000));
      for (const id of scopeIdsOf(row.gateway_key_id, row.user_id, row.team_id)) {
        const spend = this.spendOf(id, now);
        spend.usd.monthly += cost;
        if (day === today) spend.usd.daily += cost;
      }
    }
  }

  /** The first cap the key's request would go over, or null. */
  refusal(key: StoredKey, now = new Date()): QuotaRefusal | null {
    for (const scope of this.scopesOf(key)) {
      for (const window of ['daily', 'monthly'] as const) {
        const cap = scope.caps[window];
        if (cap === null) continue;
        const spent = this.spent(scope.id, window, now);
        if (spent >= cap)
          return {
            window,
            capUsd: cap,
            spentUsd: spent,
            retryAfterSeconds: secondsUntilTurn(window, now),
            scope: scope.id,
          };
      }
    }
    return null;
  }

  /**
   * Adds a call's cost (its `llm.call_completed` is `eventId`); returns the alerts it owes (thresholds
   * crossed by this call).
   */
  record(
    key: StoredKey,
    costUsd: number,
    eventId: string | null,
    now = new Date(),
  ): PayloadOf<'quota.alert'>[] {
    const alerts: PayloadOf<'quota.alert'>[] = [];
    if (!(costUsd > 0)) return alerts;
    const ids = scopeIdsOf(key.id, key.user_id, key.team_id);
    const before = new Map(
      ids.map((id) => [id, { daily: this.spent(id, 'daily', now), monthly: this.spent(id, 'monthly', now) }]),
    );
    if (this.shared && eventId !== null)
      this.pending.push({ eventId, scopes: ids, day: dayOf(now), costUsd });
    else
      for (const id of ids) {
        const spend = this.spendOf(id, now);
        spend.usd.daily += costUsd;
        spend.usd.monthly += costUsd;
      }
    for (const id of ids) {
      const scope = this.scopesOf(key).find((s) => s.id === id);
      for (const window of ['daily', 'monthly'] as const) {
        const was = before.get(id)![window];
        const after = was + costUsd;
        const cap = scope?.caps[window] ?? null;
        if (scope === undefined || cap === null) continue;
        for (const pct of this.config.alert_thresholds_pct) {
          const line = (cap * pct) / 100;
          if (was < line && after >= line)
            alerts.push({
              scope: window,
              threshold_pct: pct,
              spent_usd: usdDecimal(after),
              cap_usd: usdDecimal(cap),
              gateway_key_id: scope.keyId,
              user_id: scope.userId,
            });
        }
      }
    }
    return alerts;
  }

  /** Spent so far in a window: the store's count and this node's calls it does not hold yet. */
  spent(scopeId: string, window: QuotaWindow, now = new Date()): number {
    const today = dayOf(now);
    let usd = this.spendOf(scopeId, now).usd[window];
    for (const call of this.pending) {
      if (!call.scopes.includes(scopeId)) continue;
      if (window === 'daily' ? call.day === today : call.day.slice(0, 7) === today.slice(0, 7))
        usd += call.costUsd;
    }
    return usd;
  }

  private scopesOf(key: StoredKey): Scope[] {
    const scopes: Scope[] = [
      {
        id: `key:${key.id}`,
        keyId: key.id,
        userId: key.user_id,
        caps: { daily: amount(key.daily_cap_usd), monthly: amount(key.monthly_cap_usd) },
      },
    ];
    const user = key.user_id === null ? undefined : this.config.users[key.user_id];
    if (user !== undefined)
      scopes.push({
        id: `user:${key.user_id}`,
        keyId: null,
        userId: key.user_id,
        caps: { daily: amount(user.daily_usd), monthly: amount(user.monthly_usd) },
      });
    const team = key.team_id === null ? undefined : this.config.teams[key.team_id];
    if (team !== undefined)
      // quota.alert has no team field: a team's alert names neither a key nor a user.
      scopes.push({
        id: `team:${key.team_id}`,
        keyId: null,
        userId: null,
        caps: { daily: amount(team.daily_usd), monthly: amount(team.monthly_usd) },
      });
    return scopes;
  }

  private spendOf(id: string, now: Date): Spend {
    const period = { daily: dayOf(now), monthly: dayOf(now).slice(0, 7) };
    let spend = this.spend.get(id);
    if (spend === undefined) {
      spend = { period, usd: { daily: 0, monthly: 0 } };
      this.spend.set(id, spend);
    }
    for (const window of ['daily', 'monthly'] as const) {
      if (spend.period[window] !== period[window]) {
        spend.period[window] = period[window];
        spend.usd[window] = 0;
      }
    }
    return spend;
  }
}

function scopeIdsOf(keyId: string, userId: string | null, teamId: string | null): string[] {
  return [`key:${keyId}`, ...(userId ? [`user:${userId}`] : []), ...(teamId ? [`team:${teamId}`] : [])];
}

function amount(value: string | null | undefined): number | null {
  return value === null || value === undefined ? null : Number(value);
}

function dayOf(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/** Seconds until the window turns (the next UTC midnight, or the first of next month). */
function secondsUntilTurn(window: QuotaWindow, now: Date): number {
  const next =
    window === 'daily'
      ? Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)
      : Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
}
