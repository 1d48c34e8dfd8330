import { createHmac, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import { backoffMs } from '../core/backoff.js';
import type { MetisEvent } from '../core/events/envelope.js';
import { definePlugin } from './define-plugin.js';
import { filterFrom, filterOptions } from './filter-options.js';

export const WebhookOptions = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  /** HMAC-SHA256 key: each POST carries `x-metis-signature: sha256=<hex HMAC of the body>`. */
  secret: z.string().min(1),
  /** Extra request headers, e.g. an authorization header of the receiver. */
  headers: z.record(z.string(), z.string()).default({}),
  /** Events per POST at most. */
  batch_size: z.number().int().min(1).max(10_000).default(100),
  /** A partial batch is sent after this long. */
  flush_interval_ms: z.number().int().positive().default(1000),
  /** Events waiting to be sent at most; past it new events are dropped, counted and logged. */
  max_buffer: z.number().int().positive().default(10_000),
  /** Retries of a batch after the first attempt (network error, timeout, 408, 429, 5xx). */
  max_retries: z.number().int().min(0).max(20).default(5),
  /** Wait before the first retry; doubled on each retry up to `max_backoff_ms`. */
  initial_backoff_ms: z.number().int().positive().default(500),
  max_backoff_ms: z.number().int().positive().default(30_000),
  /** Timeout of one POST. */
  timeout_ms: z.number().int().positive().default(10_000),
  ...filterOptions,
});

export type WebhookOptions = z.output<typeof WebhookOptions>;

/** `sha256=<hex>`: the `x-metis-signature` header of a body. */
export function signBody(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

function isRetryable(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * Buffers events and POSTs them in batches, one request at a time, off the dispatch path: `push` is
 * O(1) and never waits, so the plugin runs on the fast path. A batch that fails is retried with
 * exponential backoff (same body, same signature, same `x-metis-delivery` id for deduplication).
 */
export class WebhookSender {
  readonly counters = { sent: 0, failed: 0, dropped: 0, retries: 0, batches: 0 };
  private buffer: MetisEvent[] = [];
  private sending: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Set by `stop`: retries give up at this time. */
  private deadline = Number.POSITIVE_INFINITY;
  /** Ends a backoff wait early, so `stop` makes its last attempt at once. */
  private wake: (() => void) | null = null;

  constructor(
    private readonly options: WebhookOptions,
    private readonly logger: Logger,
  ) {}

  get buffered(): number {
    return this.buffer.length;
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.options.flush_interval_ms);
    this.timer.unref();
  }

  push(event: MetisEvent): void {
    if (this.buffer.length >= this.options.max_buffer) {
      this.counters.dropped += 1;
      if (this.counters.dropped === 1 || this.counters.dropped % 1000 === 0) {
        this.logger.warn(
          { dropped: this.counters.dropped, max_buffer: this.options.max_buffer },
          'webhook buffer full; dropping events',
        );
      }
      return;
    }
    this.buffer.push(event);
    // Sending starts on a later tick: push runs on the fast path and must stay O(1).
    if (this.buffer.length === this.options.batch_size) setImmediate(() => this.kick());
  }

  /** Sends what is buffered, retrying until `timeoutMs` has passed; what is left then is dropped. */
  async stop(timeoutMs: number): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.deadline = Date.now() + timeoutMs;
    this.wake?.();
    await this.sending;
    if (this.buffer.length > 0) {
      this.kick();
      await this.sending;
    }
    if (this.buffer.length > 0) {
      this.counters.dropped += this.buffer.length;
      this.logger.warn({ dropped: this.buffer.length }, 'webhook stopped with unsent events');
      this.buffer = [];
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    }).finally(() => {
      this.wake = null;
    });
  }

  private kick(): void {
    if (this.sending !== null || this.buffer.length === 0) return;
    this.sending = this.drain().finally(() => {
      this.sending = null;
    });
  }

  private async drain(): Promise<void> {
    while (this.buffer.length > 0 && Date.now() < this.deadline) {
      await this.deliver(this.buffer.splice(0, this.options.batch_size));
    }
  }

  private async deliver(events: MetisEvent[]): Promise<void> {
    const delivery = randomUUID();
    const body = JSON.stringify({ delivery_id: delivery, events });
    const headers = {
      ...this.options.headers,
      'content-type': 'application/json',
      'x-metis-delivery': delivery,
      'x-metis-signature': signBody(this.options.secret, body),
    };
    let problem = '';
    for (let attempt = 0; attempt <= this.options.max_retries; attempt += 1) {
      let retryAfterMs = 0;
      try {
        const response = await fetch(this.options.url, {
          method: 'POST',
          headers,
          body,
          signal: AbortSignal.timeout(this.options.timeout_ms),
        });
        await response.arrayBuffer().catch(() => undefined);
        if (response.ok) {
          this.counters.sent += events.length;
          this.counters.batches += 1;
          return;
        }
        problem = `HTTP ${response.status}`;
        if (!isRetryable(response.status)) break;
        retryAfterMs = Number(response.headers.get('retry-after') ?? 0) * 1000 || 0;
      } catch (error) {
        problem = (error as Error).message;
      }
      if (attempt === this.options.max_retries) break;
      const backoff = backoffMs(
        { baseMs: this.options.initial_backoff_ms, maxMs: this.options.max_backoff_ms },
        attempt,
      );
      const wait = Math.min(Math.max(backoff, retryAfterMs), this.options.max_backoff_ms);
      if (Date.now() + wait > this.deadline) break;
      this.counters.retries += 1;
      this.logger.debug(
        { attempt: attempt + 1, wait_ms: wait, problem },
        'webhook delivery failed; retrying',
      );
      await this.sleep(wait);
    }
    this.counters.failed += events.length;
    this.logger.warn({ events: events.length, problem, delivery_id: delivery }, 'webhook delivery gave up');
  }
}

/** `webhook`: POSTs batches of events as JSON to a URL, signed with an HMAC header, with retries. */
export default definePlugin({
  name: 'webhook',
  optionsSchema: WebhookOptions,
  create(options, ctx) {
    const sender = new WebhookSender(options, ctx.logger);
    return {
      filter: filterFrom(options),
      // push() is O(1) and never waits: the sending happens on timers, off the dispatch path.
      fastPath: true,
      handle: (event) => sender.push(event),
      start: () => sender.start(),
      stop: () => sender.stop(Math.min(options.timeout_ms, 5000)),
      stats: () => ({ ...sender.counters, buffered: sender.buffered }),
    };
  },
});
