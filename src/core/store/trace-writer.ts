import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import { silentLogger } from '../logger.js';
import { BatchCommitter, type CommitResult, type RowWrite, type WriteItem } from './batch-committer.js';
import { CommitWaiters } from './commit-waiters.js';
import type { Db } from './database.js';
import { DropReporter } from './drop-reporter.js';
import { sqliteDroppedRunReads } from './dropped-run-reads.js';
import { RetrySchedule } from './retry-schedule.js';
import { nextRowId } from './row-ids.js';
import type { RowSink } from './session-writes.js';
import { rowApplierOf } from './sqlite-row-applier.js';
import { type StorageFailure, storageError } from './storage-errors.js';
import type { BatchListener, CommitListener, StoreWriter, StoreWriterStats } from './store-writer.js';
import { admitEvents, type BufferBounds, bufferBounds, ROW_OVERHEAD_BYTES } from './write-admission.js';
import { WriteQueue } from './write-queue.js';
import { WriterListeners } from './writer-listeners.js';

export type { RowWrite } from './batch-committer.js';

export type { BatchListener, BatchReport, CommitListener } from './store-writer.js';

export interface TraceWriterOptions {
  readonly logger?: Logger;
  /** The database file, named in error messages ("disk full at ..."). */
  readonly path?: string;
  /** Events that may wait for storage to come back; past this, new events are dropped (default 100,000). */
  readonly maxBufferedEvents?: number;
  /** Bytes of events (their payload JSON plus a row overhead) that may wait (default 64 MiB). */
  readonly maxBufferedBytes?: number;
  /** First retry delay; it doubles per attempt up to `retryMaxDelayMs` (defaults 10 ms and 1 s). */
  readonly retryDelayMs?: number;
  readonly retryMaxDelayMs?: number;
}

/** A recovery after an outage commits the backlog in transactions of at most this many items. */
const MAX_ITEMS_PER_RECOVERY_TRANSACTION = 5000;

const WRITERS = new WeakMap<Db, TraceWriter>();

/** The trace writer of a connection, if one is attached: the session store queues its rows there. */
export function writerOf(db: Db): TraceWriter | undefined {
  return WRITERS.get(db);
}

/**
 * Writes a row now when no writer is attached, else queues it behind the events before it: with a
 * writer, a row never throws a SQLite error (an outage, a lock) into a turn.
 */
/** Row writes on a SQLite connection: through its trace writer when one is attached, else at once. */
export function sqliteRowSink(db: Db): RowSink {
  return { write: (row) => writeRow(db, row), nextRowId: () => nextRowId(db) };
}

export function writeRow(db: Db, row: RowWrite): void {
  const writer = writerOf(db);
  if (writer === undefined) {
    const outcome = rowApplierOf(db).apply(row.change);
    row.settled?.(true, outcome);
    return;
  }
  writer.writeRow(row);
}

/**
 * The trace store's fast-path subscriber (bus spec §3.3). Group commit: the events of one dispatch
 * tick are written in one `BEGIN IMMEDIATE` transaction (DESIGN.md invariant 3), and listeners
 * registered with `onCommit` get each batch after it committed: the server publishes only from there
 * (invariant 2). The session store's rows go through the same ordered queue.
 *
 * Storage that fails for a while (another process's lock, a full disk, an I/O error) never blocks the
 * loop and never loses order: the queue waits and is retried with backoff until storage comes back.
 * While it waits it is bounded (events and bytes); events past the bound are dropped, and once storage
 * is back each dropped run is reported as `bus.gap_detected` in its session. A row refused for its own
 * sake (a constraint) is isolated with a savepoint per item and dropped alone, with an ERROR log.
 */
export class TraceWriter implements StoreWriter {
  readonly stats: StoreWriterStats = {
    committedEvents: 0,
    committedBatches: 0,
    droppedEvents: 0,
    retries: 0,
    rejectedRows: 0,
  };
  private readonly logger: Logger;
  private readonly path: string | null;
  private readonly bounds: BufferBounds;
  private readonly listeners: WriterListeners;
  /** Duration of the last transaction that committed, for `onBatch`. */
  private lastCommitMs = 0;
  private readonly waiters = new CommitWaiters();
  private readonly drops: DropReporter;
  private readonly queue = new WriteQueue();
  private draining = false;
  private closed = false;
  /** One ERROR line per overflow episode, not one per tick. */
  private overflowLogged = false;
  private idleWaiters: (() => void)[] = [];
  private bus: EventBus | null = null;
  private readonly committer: BatchCommitter;
  private readonly retries: RetrySchedule;

  constructor(
    readonly db: Db,
    options: TraceWriterOptions = {},
  ) {
    this.logger = options.logger ?? silentLogger();
    this.path = options.path ?? null;
    this.bounds = bufferBounds(options);
    this.listeners = new WriterListeners(this.logger);
    this.committer = new BatchCommitter(db);
    this.retries = new RetrySchedule(
      this.logger,
      this.path,
      options.retryDelayMs ?? 10,
      options.retryMaxDelayMs ?? 1000,
    );
    this.drops = new DropReporter(
      {
        reads: sqliteDroppedRunReads(db),
        bus: () => this.bus,
        // SQLite commits at the call, so anything still queued means storage is not back yet.
        ready: () => !this.closed && this.retries.failure === null && this.queue.length === 0,
        whenCommitted: (eventId) => this.whenCommitted(eventId),
        writeRow: (row) => this.writeRow(row),
      },
      this.logger,
    );
    WRITERS.set(db, this);
  }

  /** Subscribes to every event on the bus, on the fast path. */
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

  /** Called with the events dropped: past the buffer's bound, or refused one by one. */
  onDrop(listener: CommitListener): void {
    this.listeners.onDrop(listener);
  }

  /** Observes every batch once it is settled, committed or dropped (metrics). */
  onBatch(listener: BatchListener): () => void {
    return this.listeners.onBatch(listener);
  }

  /** The storage failure the writer is waiting out, or null when storage is writable. */
  get failure(): StorageFailure | null {
    return this.retries.failure;
  }

  /** Events and rows waiting to be committed. */
  get buffered(): { events: number; bytes: number; items: number } {
    return { events: this.queue.events, bytes: this.queue.bytes, items: this.queue.length };
  }

  /** Queues one tick's events; commits them now unless storage is being waited out. */
  write(events: readonly MetisEvent[]): void {
    if (events.length === 0) return;
    const dropped = admitEvents(this.queue, events, this.retries.waiting, this.bounds, this.drops.ledger);
    this.drops.handed(events, dropped);
    if (dropped.length > 0) this.dropOverflow(dropped);
    this.drain();
  }

  /** Queues a session-store row behind every event and row already queued. Rows are never dropped. */
  writeRow(row: RowWrite): void {
    if (this.closed) {
      row.settled?.(false);
      return;
    }
    // Events emitted before this row may still sit in the bus's queue until its next tick: hand them to
    // the writer first, so the row commits after them (in order), not ahead of them in a transaction of
    // its own. Inside a dispatch the bus defers this, and the events being dispatched are queued already.
    this.bus?.dispatchNow();
    this.queue.push({ row, bytes: ROW_OVERHEAD_BYTES });
    this.drain();
  }

  /**
   * Resolves once `eventId` is committed. Rejects with METIS_ERR_STORAGE_BUSY, _FULL or _IO when it
   * was dropped, or when it is still waiting after `timeoutMs` (0: no limit).
   */
  storageRefusal(): MetisError {
    return storageError(this.retries.failure ?? 'busy', this.path);
  }

  whenCommitted(eventId: string, timeoutMs = 0): Promise<void> {
    return this.waiters.waitAtMost(eventId, timeoutMs, () => this.storageRefusal());
  }

  /** Resolves once nothing waits to be committed; with a timeout, resolves false if still waiting. */
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

  /** Stops retrying (the database is about to close); whatever still waits is abandoned. */
  close(): void {
    this.closed = true;
    this.retries.cancel();
  }

  private drain(): void {
    if (this.retries.waiting || this.draining || this.closed) return;
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        const recovering = this.retries.failure !== null;
        const items = this.queue.front(recovering ? MAX_ITEMS_PER_RECOVERY_TRANSACTION : undefined);
        const result = this.commit(items);
        if (result === null) return;
        this.queue.removeFront(items.length);
        this.settle(items, result);
        if (recovering && this.queue.length > 0) {
          // A long backlog: let the loop breathe between transactions.
          setImmediate(() => this.drain());
          return;
        }
      }
      if (this.retries.failure !== null) this.recovered();
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    } finally {
      this.draining = false;
    }
  }

  /** Commits `items`; returns what became of them, or null when storage failed and a retry is scheduled. */
  private commit(items: readonly WriteItem[]): CommitResult | null {
    const started = performance.now();
    try {
      const result = this.committer.commit(items);
      this.lastCommitMs = performance.now() - started;
      return result;
    } catch (error) {
      this.stats.retries += 1;
      this.retries.failed(error, items.length, () => this.drain());
      return null;
    }
  }

  private settle(items: readonly WriteItem[], { refused, outcomes }: CommitResult): void {
    const committed: MetisEvent[] = [];
    const rejected: MetisEvent[] = [];
    for (const item of items) {
      const error = refused.get(item);
      if (error !== undefined) {
        this.stats.rejectedRows += 1;
        this.logger.error(
          {
            row: 'event' in item ? { event_id: item.event.id, type: item.event.type } : item.row.what,
            err: { message: (error as Error).message, code: (error as { code?: string }).code },
          },
          'trace store refused one row; it is dropped and the rest of its batch committed',
        );
        if ('event' in item) rejected.push(item.event);
        else item.row.settled?.(false);
      } else if ('event' in item) {
        committed.push(item.event);
      } else {
        item.row.settled?.(true, outcomes.get(item));
      }
    }
    if (committed.length > 0) {
      this.stats.committedEvents += committed.length;
      this.stats.committedBatches += 1;
      this.waiters.committed(committed);
      this.listeners.commit(committed, this.lastCommitMs);
    }
    if (rejected.length > 0) {
      this.stats.droppedEvents += rejected.length;
      this.waiters.dropped(rejected, () => storageError('io', this.path));
      this.listeners.drop(rejected, this.lastCommitMs);
    }
  }

  private recovered(): void {
    this.retries.recovered();
    this.overflowLogged = false;
    this.drops.recovered();
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
        'trace store buffer full while storage is unavailable; events dropped (reported as bus.gap_detected once storage is back)',
      );
    this.overflowLogged = true;
    this.waiters.dropped(dropped, () => this.storageRefusal());
    this.listeners.drop(dropped, 0);
  }
}
