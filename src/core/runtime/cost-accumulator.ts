import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { CountedCost } from '../store/session-as-of.js';
import { COST_EVENT_TYPES } from '../store/session-store.js';

/** Counted amounts kept per session: far more than lie between a snapshot point and now. */
const RECENT_PER_SESSION = 64;

/**
 * Keeps each session's running cost (bus §5.4 built-in subscriber, fast path) for snapshots. Worker
 * spend rolls up into the planner through `delegate.completed` (§8.3), and through `delegate.failed`,
 * whose `worker_total_cost_usd` is spend too (the partial spend before the failure, §6.8).
 */
export class CostAccumulator {
  private readonly costs = new Map<string, number>();
  /** Per session, the id of the newest cost event counted (or stored when seeded): see `counted`. */
  private readonly upTo = new Map<string, string>();
  /**
   * Per session, the newest counted amounts with their event ids: a snapshot takes back those after
   * its point, which may not be stored yet (store/session-as-of.ts).
   */
  private readonly recent = new Map<string, { id: string; amount: number }[]>();
  private handle: SubscriptionHandle | null = null;

  attach(bus: EventBus): void {
    this.handle = bus.subscribe({
      name: 'cost-accumulator',
      fastPath: true,
      filter: { event_types: [...COST_EVENT_TYPES] },
      handler: (event) => {
        const amount =
          event.type === 'llm.call_completed'
            ? Number(event.payload.cost_usd)
            : Number.parseFloat(String(event.payload.worker_total_cost_usd));
        if (Number.isFinite(amount))
          this.costs.set(event.session_id, (this.costs.get(event.session_id) ?? 0) + amount);
        this.upTo.set(event.session_id, event.id);
        let recent = this.recent.get(event.session_id);
        if (recent === undefined) {
          recent = [];
          this.recent.set(event.session_id, recent);
        }
        recent.push({ id: event.id, amount: Number.isFinite(amount) ? amount : 0 });
        if (recent.length > RECENT_PER_SESSION) recent.shift();
      },
    });
  }

  detach(bus: EventBus): void {
    if (this.handle) bus.unsubscribe(this.handle, 'shutdown');
    this.handle = null;
  }

  /** Cost so far in USD, rounded to 1e-8 so sums of floats print cleanly. */
  costOf(sessionId: string): number {
    return Math.round((this.costs.get(sessionId) ?? 0) * 1e8) / 1e8;
  }

  /**
   * The unrounded running cost and the id of the newest event it counts, so that a snapshot can derive
   * the cost as of another id from the few stored cost events between the two (store/session-as-of.ts).
   */
  counted(sessionId: string): CountedCost {
    return {
      costUsd: this.costs.get(sessionId) ?? 0,
      upTo: this.upTo.get(sessionId) ?? null,
      recent: this.recent.get(sessionId) ?? [],
    };
  }

  /** Drops a session's sum (written by another process since): the next `seed` sets it again. */
  forget(sessionId: string): void {
    this.costs.delete(sessionId);
    this.upTo.delete(sessionId);
    this.recent.delete(sessionId);
  }

  /**
   * Seeds a session's cost after a restart (from its stored cost events); `upTo` is the newest stored
   * event of the session that sum covers.
   */
  seed(sessionId: string, costUsd: number, upTo: string | null): void {
    if (this.costs.has(sessionId)) return;
    this.costs.set(sessionId, costUsd);
    if (upTo !== null) this.upTo.set(sessionId, upTo);
  }
}
