import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { MetisEvent } from '../events/envelope.js';
import { silentLogger } from '../logger.js';
import type { Db } from './database.js';
import { eventToParams } from './event-rows.js';

export type CommitListener = (events: readonly MetisEvent[]) => void;

/** What `onBatch` observers learn of each batch: for metrics, so they never touch the write path. */
export interface BatchReport {
  readonly events: readonly MetisEvent[];
  /** Time spent in the transaction that committed the batch (or in its last failed attempt). */
  readonly durationMs: number;
  readonly outcome: 'committed' | 'dropped';
}
export type BatchListener = (report: BatchReport) => void;

export interface TraceWriterOptions {
  readonly logger?: Logger;
  /** Attempts for a batch that meets SQLITE_BUSY before it is dropped (default 5). */
  readonly maxAttempts?: number;
  readonly retryDelayMs?: number;
}

export interface TraceWriterStats {
  committedEvents: number;
  committedBatches: number;
  droppedEvents: number;
  retries: number;
}

/**
 * The trace store's fast-path subscriber (bus spec §3.3). Group commit: every event of one dispatch
 * tick is written in one `BEGIN IMMEDIATE` transaction (DESIGN.md invariant 3). Listeners registered
 * with `onCommit` receive each batch after its transaction committed, in order: the streaming server
 * publishes only from there (invariant 2).
 *
 * A batch that meets SQLITE_BUSY is retried later, and the batches behind it wait so order holds. A
 * batch that still fails is logged at ERROR and dropped: its `seq` hole is what gap detection reports.
 */
export class TraceWriter {
  readonly stats: TraceWriterStats = {
    committedEvents: 0,
    committedBatches: 0,
    droppedEvents: 0,
    retries: 0,
  };
  private readonly logger: Logger;
  private readonly maxAttempts: number;
  private readonly retryDelayMs: number;
  private readonly listeners: CommitListener[] = [];
  private readonly dropListeners: CommitListener[] = [];
  private readonly batchListeners: BatchListener[] = [];
  private readonly knownSessions = new Set<string>();
  private readonly backlog: MetisEvent[][] = [];
  private attempts = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private idleWaiters: (() => void)[] = [];
  private readonly insertEvent;
  private readonly insertSession;
  private readonly commitBatch;

  constructor(
    readonly db: Db,
    options: TraceWriterOptions = {},
  ) {
    this.logger = options.logger ?? silentLogger();
    this.maxAttempts = options.maxAttempts ?? 5;
    this.retryDelayMs = options.retryDelayMs ?? 25;
    this.insertEvent = db.prepare(
      `INSERT OR IGNORE INTO events
         (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertSession = db.prepare(
      'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)',
    );
    this.commitBatch = db.transaction((events: readonly MetisEvent[]) => {
      for (const event of events) {
        if (!this.knownSessions.has(event.session_id)) {
          const now = Date.now() * 1000;
          this.insertSession.run(event.session_id, now, now);
        }
        this.insertEvent.run(eventToParams(event));
      }
    });
  }

  /** Subscribes to every event on the bus, on the fast path. */
  attach(bus: EventBus): SubscriptionHandle {
    return bus.subscribe({
      name: 'trace-store-writer',
      fastPath: true,
      knownTypes: 'all',
      batchHandler: (events) => this.write(events),
    });
  }

  onCommit(listener: CommitListener): () => void {
    this.listeners.push(listener);
    return () => {
      const index = this.listeners.indexOf(listener);
      if (index >= 0) this.listeners.splice(index, 1);
    };
  }

  /** Called with each batch that was dropped after failing to commit. */
  onDrop(listener: CommitListener): void {
    this.dropListeners.push(listener);
  }

  /** Observes every batch once it is settled, committed or dropped (metrics). */
  onBatch(listener: BatchListener): () => void {
    this.batchListeners.push(listener);
    return () => {
      const index = this.batchListeners.indexOf(listener);
      if (index >= 0) this.batchListeners.splice(index, 1);
    };
  }

  /** Writes one batch in one transaction, or queues it behind a batch that is waiting to be retried. */
  write(events: readonly MetisEvent[]): void {
    if (events.length === 0) return;
    this.backlog.push(events.slice());
    if (this.retryTimer === null) this.drainBacklog();
  }

  /** Resolves once no batch is waiting for a retry. */
  idle(): Promise<void> {
    if (this.backlog.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private drainBacklog(): void {
    while (this.backlog.length > 0) {
      const batch = this.backlog[0]!;
      const started = performance.now();
      try {
        this.commitBatch.immediate(batch);
      } catch (error) {
        if (this.handleFailure(batch, error) === 'retry') return;
        this.backlog.shift();
        this.report(batch, started, 'dropped');
        continue;
      }
      this.report(batch, started, 'committed');
      this.backlog.shift();
      this.attempts = 0;
      for (const event of batch) this.knownSessions.add(event.session_id);
      this.stats.committedEvents += batch.length;
      this.stats.committedBatches += 1;
      this.publish(batch);
    }
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private handleFailure(batch: readonly MetisEvent[], error: unknown): 'retry' | 'drop' {
    const code = (error as { code?: string }).code ?? '';
    this.attempts += 1;
    if (code.startsWith('SQLITE_BUSY') && this.attempts < this.maxAttempts) {
      this.stats.retries += 1;
      this.logger.warn({ attempt: this.attempts, events: batch.length }, 'trace store busy; retrying batch');
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.drainBacklog();
      }, this.retryDelayMs * this.attempts);
      return 'retry';
    }
    this.attempts = 0;
    this.stats.droppedEvents += batch.length;
    this.logger.error(
      {
        events: batch.length,
        first_id: batch[0]?.id,
        last_id: batch[batch.length - 1]?.id,
        err: error instanceof Error ? { message: error.message, code } : String(error),
      },
      'trace store failed to commit a batch; events dropped (gap detection will report the hole)',
    );
    for (const listener of this.dropListeners) listener(batch);
    return 'drop';
  }

  private report(events: readonly MetisEvent[], started: number, outcome: BatchReport['outcome']): void {
    if (this.batchListeners.length === 0) return;
    const report: BatchReport = { events, durationMs: performance.now() - started, outcome };
    for (const listener of this.batchListeners) {
      try {
        listener(report);
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'batch listener failed');
      }
    }
  }

  private publish(batch: readonly MetisEvent[]): void {
    for (const listener of this.listeners) {
      try {
        listener(batch);
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'commit listener failed');
      }
    }
  }
}
