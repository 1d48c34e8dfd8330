import type { Logger } from 'pino';
import type { MetisEvent } from '../events/envelope.js';
import type { Subscription, SubscriptionStats } from './subscription.js';

/**
 * The queue of a non-fast-path subscriber. Events are handed over synchronously (O(1), never blocks the
 * dispatcher) and delivered one at a time on the subscriber's own schedule, so a slow or failing
 * subscriber delays nobody else (bus spec §3.4, §5.2; DESIGN.md invariant 7).
 */
export class Mailbox {
  private readonly queue: MetisEvent[] = [];
  private head = 0;
  private running = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly subscription: Subscription,
    private readonly stats: SubscriptionStats,
    private readonly limit: number,
    private readonly onError: (error: unknown, events: readonly MetisEvent[]) => void,
    private readonly logger: Logger,
  ) {}

  get size(): number {
    return this.queue.length - this.head;
  }

  offer(events: readonly MetisEvent[]): void {
    for (const event of events) {
      if (this.size >= this.limit) {
        this.stats.dropped += 1;
        if (this.stats.dropped === 1 || this.stats.dropped % 1000 === 0) {
          this.logger.warn(
            { subscription: this.subscription.name, dropped: this.stats.dropped, limit: this.limit },
            'subscriber mailbox full; dropping events',
          );
        }
        continue;
      }
      this.queue.push(event);
    }
    if (!this.running && this.size > 0) {
      this.running = true;
      setImmediate(() => void this.pump());
    }
  }

  /** Resolves when every event handed over so far has been handled. */
  idle(): Promise<void> {
    if (!this.running && this.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async pump(): Promise<void> {
    const { handler, batchHandler } = this.subscription;
    while (this.size > 0) {
      const batch = this.queue.slice(this.head);
      this.queue.length = 0;
      this.head = 0;
      if (batchHandler) {
        try {
          await batchHandler(batch);
          this.stats.delivered += batch.length;
        } catch (error) {
          this.stats.failed += batch.length;
          this.onError(error, batch);
        }
      }
      if (handler) {
        for (const event of batch) {
          try {
            await handler(event);
            this.stats.delivered += 1;
          } catch (error) {
            this.stats.failed += 1;
            this.onError(error, [event]);
          }
        }
      }
    }
    this.running = false;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
