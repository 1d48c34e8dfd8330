import type { Logger } from 'pino';
import { backoffMs } from '../backoff.js';
import { type StorageFailure, storageFailureOf } from './storage-errors.js';

/**
 * The trace writer's outage bookkeeping: which failure it waits out, since when, and when to try
 * again (a delay doubling from `baseMs` to `maxMs`, with no limit on attempts: storage that comes back
 * after an hour still gets everything). Logs the first failure of an outage, then attempts 2, 4, 8...,
 * so an hour-long outage writes about twenty lines, and one line when storage is back.
 */
export class RetrySchedule {
  private current: StorageFailure | null = null;
  private since = 0;
  private attempts = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly logger: Logger,
    private readonly path: string | null,
    private readonly baseMs: number,
    private readonly maxMs: number,
  ) {}

  get failure(): StorageFailure | null {
    return this.current;
  }

  /** True while a retry is scheduled: the writer must not write until it fires. */
  get waiting(): boolean {
    return this.timer !== null;
  }

  /** Records a failed write of `items` items and calls `retry` after the backoff. */
  failed(error: unknown, items: number, retry: () => void): StorageFailure {
    const failure = storageFailureOf(error, this.path ?? undefined) ?? 'io';
    this.attempts += 1;
    if (this.current === null) this.since = performance.now();
    if ((this.attempts & (this.attempts - 1)) === 0) {
      this.logger.warn(
        { failure, attempt: this.attempts, waiting_items: items, err: (error as Error).message },
        'trace store unavailable; events wait in memory and the write is retried',
      );
    }
    this.current = failure;
    const delay = backoffMs({ baseMs: this.baseMs, maxMs: this.maxMs }, this.attempts - 1);
    this.timer = setTimeout(() => {
      this.timer = null;
      retry();
    }, delay);
    return failure;
  }

  /** Storage took everything that waited: the outage is over. */
  recovered(): void {
    if (this.current === null) return;
    this.logger.info(
      {
        failure: this.current,
        outage_ms: Math.round(performance.now() - this.since),
        retries: this.attempts,
      },
      'trace store writable again; every waiting event is committed',
    );
    this.current = null;
    this.attempts = 0;
  }

  cancel(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
