import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { EventBus } from '../../bus/event-bus.js';
import type { SubscriptionHandle } from '../../bus/subscription.js';
import { MetisError } from '../../errors.js';
import type { MetisEvent } from '../../events/envelope.js';
import { silentLogger } from '../../logger.js';
import type { RowWrite, WriteItem } from '../batch-committer.js';
import { CommitWaiters } from '../commit-waiters.js';
import { DropReporter } from '../drop-reporter.js';
import { RetrySchedule } from '../retry-schedule.js';
import type { StorageFailure } from '../storage-errors.js';
import { storeUnavailable } from '../store-unavailable.js';
import type { BatchListener, CommitListener, StoreWriter, StoreWriterStats } from '../store-writer.js';
import { admitEvents, type BufferBounds, bufferBounds, ROW_OVERHEAD_BYTES } from '../write-admission.js';
import { WriteQueue } from '../write-queue.js';
import { WriterListeners } from '../writer-listeners.js';
import { pgDroppedRunReads } from './pg-dropped-run-reads.js';
import {
  commitPgBatch,
  type FencedFamily,
  lastCommittedBatch,
  type PgBatchOutcome,
  type WriterFence,
} from './pg-writer-batch.js';

export type { FencedFamily, WriterFence } from './pg-writer-batch.js';

export interface PgStoreWriterOptions {
  readonly pool: pg.Pool;
  /** The store as people may read it (the URL with its password hidden: store-copy.ts `redactUrl`). */
  readonly label: string;
  /** End the pool in `shutdown()`: the writer was given a pool of its own. */
  readonly ownsPool?: boolean;
  /**
   * The name of this writer's commit mark (`metis_writer_commits`): unique among the writers of the
   * store at any time, e.g. the node's id (default: a new random one per writer).
   */
  readonly writerId?: string;
  /** The lease fence of a cluster node; absent for a single server (it holds the serve lock). */
  readonly fence?: WriterFence;
  /**
   * Whether this writer may commit now: a server commits only while it holds the store's serve lock.
   * After the lock's connection is lost (a database restart) another server may take the lock before
   * this one takes it again; until it does, its commits wait as in an outage (new turns are refused).
   */
  readonly holdsStore?: () => boolean;
  /** Number the `system` session's events in the store: several writers share that session. */
  readonly numberSystemEvents?: boolean;
  readonly logger?: Logger;
  /** Events that may wait for the store to come back; past this, new events are dropped (100,000). */
  readonly maxBufferedEvents?: number;
  /** Bytes of events (payload JSON plus a row overhead) that may wait (64 MiB). */
  readonly maxBufferedBytes?: number;
  /** Items in one transaction at most: a backlog drains in transactions of this size (5,000). */
  readonly maxBatchItems?: number;
  /** First retry delay; it doubles per attempt up to `retryMaxDelayMs` (defaults 10 ms and 1 s). */
  readonly retryDelayMs?: number;
  readonly retryMaxDelayMs?: number;
}

/** A batch taken from the head of the queue: retried as it is, under the same number, until settled. */
interface Batch {
  readonly items: readonly WriteItem[];
  readonly no: number;
  /** What the last attempt that sent COMMIT wrote, for when its answer is lost. */
  sent: PgBatchOutcome | null;
}

/**
 * The store writer of a server on PostgreSQL (docs/plans/store-port.md §4): TraceWriter's contract
 * with the store across the network. Events and rows queue in one order (the same WriteQueue and
 * buffer rule); whatever queued while a commit ran is the next transaction (group commit), holding the
 * commit mark, the fence, the rows and the events (pg-writer-batch.ts). Listeners, waiters and row
 * writers hear after COMMIT.
 *
 * While the store is away the batch stays at the head and is retried with backoff; the buffer behind
 * it is bounded as TraceWriter's (endings kept). Before a retry of a batch whose COMMIT was sent, the
 * writer asks its commit mark whether it went through (the answer was lost): if so it is settled as
 * committed and never sent again, since rows are not all idempotent (a spend adds). Once the store is
 * back, each run of events dropped past the bound is reported as `bus.gap_detected` in its session with
 * a `reported_gaps` row, as TraceWriter does (drop-reporter.ts), read from PostgreSQL.
 */
export class PgStoreWriter implements StoreWriter {
  readonly stats: StoreWriterStats = {
    committedEvents: 0,
    committedBatches: 0,
    droppedEvents: 0,
    retries: 0,
    rejectedRows: 0,
  };
  private readonly pool: pg.Pool;
  private readonly label: string;
  private readonly writerId: string;
  private readonly logger: Logger;
  private readonly bounds: BufferBounds;
  private readonly maxBatchItems: number;
  private readonly listeners: WriterListeners;
  private readonly waiters = new CommitWaiters();
  private readonly drops: DropReporter;
  private readonly queue = new WriteQueue();
  private readonly retries: RetrySchedule;
  private bus: EventBus | null = null;
  private lastBatchNo: number | null = null;
  private batch: Batch | null = null;
  private lastError: unknown = null;
  private scheduled = false;
  private running: Promise<void> | null = null;
  private closed = false;
  private overflowLogged = false;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly options: PgStoreWriterOptions) {
    this.pool = options.pool;
    this.label = options.label;
    this.writerId = options.writerId ?? `writer-${randomUUID()}`;
    this.logger = options.logger ?? silentLogger();
    this.bounds = bufferBounds(options);
    this.maxBatchItems = options.maxBatchItems ?? 5_000;
    this.listeners = new WriterListeners(this.logger);
    this.retries = new RetrySchedule(
      this.logger,
      this.label,
      options.retryDelayMs ?? 10,
      options.retryMaxDelayMs ?? 1000,
    );
    this.drops = new DropReporter(
      {
        reads: pgDroppedRunReads(this.pool),
        bus: () => this.bus,
        ready: () => !this.closed && this.retries.failure === null,
        whenCommitted: (eventId) => this.whenCommitted(eventId),
        writeRow: (row) => this.writeRow(row),
      },
      this.logger,
    );
  }

  attach(bus: EventBus): SubscriptionHandle {
    this.bus = bus;
    return bus.subscribe({
      name: 'trace-store-writer',
      fastPath: true,
      knownTypes: 'all',
      batchHandler: (events) => this.write(events),
    });
  }

  onCommit(listener: CommitListener): () => void {
    return this.listeners.onCommit(listener);
  }

  onDrop(listener: CommitListener): void {
    this.listeners.onDrop(listener);
  }

  onBatch(listener: BatchListener): () => void {
    return this.listeners.onBatch(listener);
  }

  get failure(): StorageFailure | null {
    return this.retries.failure;
  }

  get buffered(): { events: number; bytes: number; items: number } {
    return { events: this.queue.events, bytes: this.queue.bytes, items: this.queue.length };
  }

  /** METIS_ERR_STORE_UNAVAILABLE naming the store by its label: away, or too slow to commit. */
  storageRefusal(): MetisError {
    if (this.retries.failure === null)
      return new MetisError(
        'METIS_ERR_STORE_UNAVAILABLE',
        `the PostgreSQL store ${this.label} did not commit in time: the request is refused`,
      );
    return storeUnavailable(
      this.label,
      this.lastError,
      'new turns are refused until it is back; what was already done waits in memory and is written then',
    );
  }

  write(events: readonly MetisEvent[]): void {
    if (events.length === 0) return;
    const bounded = this.retries.failure !== null;
    const dropped = admitEvents(this.queue, events, bounded, this.bounds, this.drops.ledger);
    this.drops.handed(events, dropped);
    if (dropped.length > 0) this.dropOverflow(dropped);
    this.kick();
  }

  writeRow(row: RowWrite): void {
    if (this.closed || row.change.kind === 'handoff.settle') {
      if (!this.closed) this.logger.error({ row: row.what }, 'a PostgreSQL store has no handoff queue');
      row.settled?.(false);
      return;
    }
    // As TraceWriter: events emitted before this row reach the queue first, so the row commits after them.
    this.bus?.dispatchNow();
    this.queue.push({ row, bytes: ROW_OVERHEAD_BYTES });
    this.kick();
  }

  whenCommitted(eventId: string, timeoutMs = 0): Promise<void> {
    return this.waiters.waitAtMost(eventId, timeoutMs, () => this.storageRefusal());
  }

  idle(timeoutMs = 0): Promise<boolean> {
    if (this.queue.length === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = timeoutMs > 0 ? setTimeout(() => resolve(false), timeoutMs) : null;
      this.idleWaiters.push(() => {
        if (timer !== null) clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** Stops retrying and committing; whatever still waits is abandoned. */
  close(): void {
    this.closed = true;
    this.retries.cancel();
  }

  /** Closes, waits for the commit in flight to settle, and ends the pool if the writer owns it. */
  async shutdown(): Promise<void> {
    this.close();
    await this.running;
    if (this.options.ownsPool) await this.pool.end();
  }

  /**
   * Starts a drain unless one runs or a retry waits. Deferred to a microtask, so that what the same
   * synchronous code queues next (a row after its events) joins the same transaction.
   */
  private kick(): void {
    if (this.scheduled || this.running !== null || this.retries.waiting || this.closed) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      if (this.running !== null || this.retries.waiting || this.closed) return;
      this.running = this.drain().finally(() => {
        this.running = null;
        if (this.queue.length > 0) this.kick();
      });
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0 && !this.closed) {
      const started = performance.now();
      let outcome: PgBatchOutcome;
      try {
        if (this.lastBatchNo === null) this.lastBatchNo = await lastCommittedBatch(this.pool, this.writerId);
        this.batch ??= {
          items: this.queue.front(this.maxBatchItems),
          no: this.lastBatchNo + 1,
          sent: null,
        };
        outcome = await this.attempt(this.batch);
      } catch (error) {
        if (this.closed) return;
        this.lastError = error;
        this.stats.retries += 1;
        this.retries.failed(error, this.batch?.items.length ?? this.queue.length, () => this.kick());
        return;
      }
      const batch = this.batch;
      this.batch = null;
      this.lastBatchNo = batch.no;
      this.queue.removeFront(batch.items.length);
      this.settle(batch.items, outcome, performance.now() - started);
    }
    if (this.queue.length > 0) return;
    if (this.retries.failure !== null) {
      this.retries.recovered();
      this.overflowLogged = false;
      this.lastError = null;
      this.drops.recovered();
    }
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** One try at `batch`, unless the commit mark shows an earlier try committed and its answer was lost. */
  private async attempt(batch: Batch): Promise<PgBatchOutcome> {
    if (this.options.holdsStore?.() === false) throw new StoreNotHeld();
    if (batch.sent !== null && (await lastCommittedBatch(this.pool, this.writerId)) >= batch.no) {
      this.logger.warn(
        { batch_no: batch.no, items: batch.items.length },
        'PostgreSQL store: a commit whose answer was lost had gone through; it is not written again',
      );
      return batch.sent;
    }
    return await commitPgBatch(
      this.pool,
      {
        writerId: this.writerId,
        batchNo: batch.no,
        items: batch.items,
        fence: this.options.fence ?? null,
        numberSystemEvents: this.options.numberSystemEvents ?? false,
      },
      (outcome) => {
        batch.sent = outcome;
      },
    );
  }

  private settle(items: readonly WriteItem[], outcome: PgBatchOutcome, durationMs: number): void {
    const committed: MetisEvent[] = [];
    const rejected: MetisEvent[] = [];
    const fenced: { event: MetisEvent; family: FencedFamily }[] = [];
    for (const item of items) {
      const family = outcome.fenced.get(item);
      const error = outcome.refused.get(item);
      if (family !== undefined) {
        if ('event' in item) fenced.push({ event: item.event, family });
        else item.row.settled?.(false);
      } else if (error !== undefined) {
        this.stats.rejectedRows += 1;
        this.logger.error(
          {
            row: 'event' in item ? { event_id: item.event.id, type: item.event.type } : item.row.what,
            err: { message: (error as Error).message, code: (error as { code?: string }).code },
          },
          'PostgreSQL store refused one row; it is dropped and the rest of its batch committed',
        );
        if ('event' in item) rejected.push(item.event);
        else item.row.settled?.(false);
      } else if ('event' in item) {
        committed.push(outcome.renumbered.get(item) ?? item.event);
      } else {
        item.row.settled?.(true);
      }
    }
    if (committed.length > 0) {
      this.stats.committedEvents += committed.length;
      this.stats.committedBatches += 1;
      this.waiters.committed(committed);
      this.listeners.commit(committed, durationMs);
    }
    if (rejected.length > 0) {
      this.stats.droppedEvents += rejected.length;
      this.waiters.dropped(rejected, () => this.refusedError());
      this.listeners.drop(rejected, durationMs);
    }
    if (outcome.fenced.size > 0) this.dropFenced(fenced, outcome, durationMs);
  }

  /** A fenced family's events are given up: their waiters learn the session runs elsewhere now. */
  private dropFenced(
    fenced: readonly { event: MetisEvent; family: FencedFamily }[],
    outcome: PgBatchOutcome,
    durationMs: number,
  ): void {
    const roots = [...new Set([...outcome.fenced.values()].map((family) => family.root))];
    this.logger.warn(
      { roots, events: fenced.length, node: this.options.fence?.nodeId },
      'PostgreSQL store: writes of families this node no longer holds were refused by the lease fence',
    );
    if (fenced.length > 0) {
      this.stats.droppedEvents += fenced.length;
      for (const { event, family } of fenced)
        this.waiters.dropped([event], () => sessionElsewhere(event.session_id, family));
      this.listeners.drop(
        fenced.map((entry) => entry.event),
        durationMs,
      );
    }
    try {
      this.options.fence?.onFenced?.(roots);
    } catch (error) {
      this.logger.warn({ err: (error as Error).message }, 'fence listener failed');
    }
  }

  private refusedError(): MetisError {
    return new MetisError(
      'METIS_ERR_STORE_UNAVAILABLE',
      `the PostgreSQL store ${this.label} refused this event (a constraint); it is not stored`,
    );
  }

  private dropOverflow(dropped: MetisEvent[]): void {
    this.stats.droppedEvents += dropped.length;
    if (!this.overflowLogged)
      this.logger.error(
        {
          events: dropped.length,
          first_id: dropped[0]!.id,
          last_id: dropped.at(-1)!.id,
          max_events: this.bounds.maxEvents,
          max_bytes: this.bounds.maxBytes,
        },
        'PostgreSQL store writer buffer full while the store is away; events dropped',
      );
    this.overflowLogged = true;
    this.waiters.dropped(dropped, () => this.storageRefusal());
    this.listeners.drop(dropped, 0);
  }
}

/** The error a fenced event's waiter gets: the session is another node's now (409, as forwarding says). */
function sessionElsewhere(sessionId: string, family: FencedFamily): MetisError {
  const where = family.holder === null ? 'no node holds its lease now' : `node ${family.holder} holds it now`;
  return new MetisError(
    'METIS_ERR_SESSION_ELSEWHERE',
    `session ${sessionId} runs elsewhere: this node lost the lease of its family (${family.root}); ${where}, ` +
      'so this event was not stored',
  );
}

/** A commit held back: the serve lock is not this server's now (it takes it again as soon as it can). */
class StoreNotHeld extends Error {
  constructor() {
    super(
      "this server does not hold the store's serve lock now: it lost the connection holding it, and writes wait until it holds it again",
    );
  }
}
