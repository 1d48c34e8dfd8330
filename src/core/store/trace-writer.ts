import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { MetisEvent } from '../events/envelope.js';
import { silentLogger } from '../logger.js';
import { CommitWaiters } from './commit-waiters.js';
import type { Db } from './database.js';
import { DropLedger } from './drop-ledger.js';
import { eventToParams } from './event-rows.js';
import { reportDroppedRanges } from './report-dropped.js';
import { type StorageFailure, storageError, storageFailureOf } from './storage-errors.js';

export type CommitListener = (events: readonly MetisEvent[]) => void;

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

export interface TraceWriterStats {
  committedEvents: number;
  committedBatches: number;
  droppedEvents: number;
  retries: number;
  /** Events and rows refused by a non-transient error (a constraint), each dropped alone. */
  rejectedRows: number;
}

/** A row write of the session store, queued with the events so that it commits in order with them. */
export interface RowWrite {
  /** What the row is, for the log when it is refused. */
  readonly what: string;
  run(): void;
  /** Called once the row committed (true) or was refused by a non-transient error (false). */
  settled?(committed: boolean): void;
}

type Item = { event: MetisEvent; params: unknown[]; bytes: number } | { row: RowWrite; bytes: number };

/** A recovery after an outage commits the backlog in transactions of at most this many items. */
const MAX_ITEMS_PER_RECOVERY_TRANSACTION = 5000;
/** Approximate bytes of a row beside its payload JSON, for the buffer's byte bound. */
const ROW_OVERHEAD_BYTES = 200;

const WRITERS = new WeakMap<Db, TraceWriter>();

/** The trace writer of a connection, if one is attached: the session store queues its rows there. */
export function writerOf(db: Db): TraceWriter | undefined {
  return WRITERS.get(db);
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
export class TraceWriter {
  readonly stats: TraceWriterStats = {
    committedEvents: 0,
    committedBatches: 0,
    droppedEvents: 0,
    retries: 0,
    rejectedRows: 0,
  };
  private readonly logger: Logger;
  private readonly path: string | null;
  private readonly maxEvents: number;
  private readonly maxBytes: number;
  private readonly retryDelayMs: number;
  private readonly retryMaxDelayMs: number;
  private readonly listeners: CommitListener[] = [];
  private readonly dropListeners: CommitListener[] = [];
  private readonly knownSessions = new Set<string>();
  private readonly waiters = new CommitWaiters();
  private readonly ledger = new DropLedger();
  private queue: Item[] = [];
  private head = 0;
  private bufferedEvents = 0;
  private bufferedBytes = 0;
  private draining = false;
  private closed = false;
  /** One ERROR line per overflow episode, not one per tick. */
  private overflowLogged = false;
  private currentFailure: StorageFailure | null = null;
  private failingSince = 0;
  private attempts = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private idleWaiters: (() => void)[] = [];
  private bus: EventBus | null = null;
  private readonly insertEvent;
  private readonly insertSession;
  private readonly commitAll;
  private readonly commitIsolated;

  constructor(
    readonly db: Db,
    options: TraceWriterOptions = {},
  ) {
    this.logger = options.logger ?? silentLogger();
    this.path = options.path ?? null;
    this.maxEvents = options.maxBufferedEvents ?? 100_000;
    this.maxBytes = options.maxBufferedBytes ?? 64 * 1024 * 1024;
    this.retryDelayMs = options.retryDelayMs ?? 10;
    this.retryMaxDelayMs = options.retryMaxDelayMs ?? 1000;
    this.insertEvent = db.prepare(
      `INSERT OR IGNORE INTO events
         (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertSession = db.prepare(
      'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)',
    );
    this.commitAll = db.transaction((items: readonly Item[]) => {
      for (const item of items) this.apply(item);
    });
    // Second pass after a non-transient failure: a savepoint per item keeps the good ones.
    const applyOne = db.transaction((item: Item) => this.apply(item));
    this.commitIsolated = db.transaction((items: readonly Item[]) => {
      const refused = new Map<Item, unknown>();
      for (const item of items) {
        try {
          applyOne(item);
        } catch (error) {
          if (storageFailureOf(error) !== null) throw error;
          refused.set(item, error);
        }
      }
      return refused;
    });
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
    this.listeners.push(listener);
    return () => {
      const index = this.listeners.indexOf(listener);
      if (index >= 0) this.listeners.splice(index, 1);
    };
  }

  /** Called with the events dropped: past the buffer's bound, or refused one by one. */
  onDrop(listener: CommitListener): void {
    this.dropListeners.push(listener);
  }

  /** The storage failure the writer is waiting out, or null when storage is writable. */
  get failure(): StorageFailure | null {
    return this.currentFailure;
  }

  /** Events and rows waiting to be committed. */
  get buffered(): { events: number; bytes: number; items: number } {
    return { events: this.bufferedEvents, bytes: this.bufferedBytes, items: this.queue.length - this.head };
  }

  /** Queues one tick's events; commits them now unless storage is being waited out. */
  write(events: readonly MetisEvent[]): void {
    if (events.length === 0) return;
    const bounded = this.retryTimer !== null;
    const dropped: MetisEvent[] = [];
    for (const event of events) {
      const params = eventToParams(event);
      const bytes = (params[9] as string).length + ROW_OVERHEAD_BYTES;
      if (
        bounded &&
        (this.bufferedEvents + 1 > this.maxEvents || this.bufferedBytes + bytes > this.maxBytes)
      ) {
        dropped.push(event);
        this.ledger.dropped(event);
        continue;
      }
      this.ledger.kept(event);
      this.queue.push({ event, params, bytes });
      this.bufferedEvents += 1;
      this.bufferedBytes += bytes;
    }
    if (dropped.length > 0) this.dropOverflow(dropped);
    this.drain();
  }

  /** Queues a session-store row behind every event and row already queued. Rows are never dropped. */
  writeRow(row: RowWrite): void {
    this.queue.push({ row, bytes: ROW_OVERHEAD_BYTES });
    this.bufferedBytes += ROW_OVERHEAD_BYTES;
    this.drain();
  }

  /**
   * Resolves once `eventId` is committed. Rejects with METIS_ERR_STORAGE_BUSY, _FULL or _IO when it
   * was dropped, or when it is still waiting after `timeoutMs` (0: no limit).
   */
  whenCommitted(eventId: string, timeoutMs = 0): Promise<void> {
    const failed = () => storageError(this.currentFailure ?? 'busy', this.path);
    const wait = this.waiters.wait(eventId, failed);
    if (timeoutMs <= 0) return wait;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(failed()), timeoutMs);
      wait.then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /** Resolves once nothing waits to be committed; with a timeout, resolves false if still waiting. */
  idle(timeoutMs = 0): Promise<boolean> {
    if (this.head === this.queue.length) return Promise.resolve(true);
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
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  private apply(item: Item): void {
    if ('row' in item) {
      item.row.run();
      return;
    }
    const sessionId = item.event.session_id;
    if (!this.knownSessions.has(sessionId)) {
      const now = Date.now() * 1000;
      this.insertSession.run(sessionId, now, now);
    }
    this.insertEvent.run(item.params);
  }

  private drain(): void {
    if (this.retryTimer !== null || this.draining || this.closed) return;
    this.draining = true;
    try {
      while (this.head < this.queue.length) {
        const recovering = this.currentFailure !== null;
        const end = recovering
          ? Math.min(this.queue.length, this.head + MAX_ITEMS_PER_RECOVERY_TRANSACTION)
          : this.queue.length;
        const items = this.queue.slice(this.head, end);
        const refused = this.commit(items);
        if (refused === null) return;
        this.head = end;
        if (this.head > 1024 && this.head * 2 > this.queue.length) {
          this.queue = this.queue.slice(this.head);
          this.head = 0;
        }
        this.settle(items, refused);
        if (recovering && this.head < this.queue.length) {
          // A long backlog: let the loop breathe between transactions.
          setImmediate(() => this.drain());
          return;
        }
      }
      if (this.currentFailure !== null) this.recovered();
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    } finally {
      this.draining = false;
    }
  }

  /** Commits `items` in one transaction; returns the items refused, or null when it must be retried. */
  private commit(items: readonly Item[]): Map<Item, unknown> | null {
    try {
      this.commitAll.immediate(items);
      return new Map();
    } catch (error) {
      if (storageFailureOf(error, this.path ?? undefined) === null) {
        try {
          return this.commitIsolated.immediate(items);
        } catch (second) {
          this.scheduleRetry(second, items.length);
          return null;
        }
      }
      this.scheduleRetry(error, items.length);
      return null;
    }
  }

  private settle(items: readonly Item[], refused: Map<Item, unknown>): void {
    const committed: MetisEvent[] = [];
    const rejected: MetisEvent[] = [];
    for (const item of items) {
      this.bufferedBytes -= item.bytes;
      if ('event' in item) this.bufferedEvents -= 1;
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
        this.knownSessions.add(item.event.session_id);
      } else {
        item.row.settled?.(true);
      }
    }
    if (committed.length > 0) {
      this.stats.committedEvents += committed.length;
      this.stats.committedBatches += 1;
      this.waiters.committed(committed);
      this.publish(this.listeners, committed);
    }
    if (rejected.length > 0) {
      this.stats.droppedEvents += rejected.length;
      this.waiters.dropped(rejected, () => storageError('io', this.path));
      this.publish(this.dropListeners, rejected);
    }
  }

  private scheduleRetry(error: unknown, items: number): void {
    const failure = storageFailureOf(error, this.path ?? undefined) ?? 'io';
    this.attempts += 1;
    this.stats.retries += 1;
    if (this.currentFailure === null) this.failingSince = performance.now();
    // The first failure of an outage and then every power of two: an hour-long outage logs ~20 lines.
    if ((this.attempts & (this.attempts - 1)) === 0) {
      this.logger.warn(
        { failure, attempt: this.attempts, waiting_items: items, err: (error as Error).message },
        'trace store unavailable; events wait in memory and the write is retried',
      );
    }
    this.currentFailure = failure;
    const delay = Math.min(this.retryMaxDelayMs, this.retryDelayMs * 2 ** Math.min(this.attempts - 1, 20));
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.drain();
    }, delay);
  }

  private recovered(): void {
    this.logger.info(
      {
        failure: this.currentFailure,
        outage_ms: Math.round(performance.now() - this.failingSince),
        retries: this.attempts,
      },
      'trace store writable again; every waiting event is committed',
    );
    this.currentFailure = null;
    this.attempts = 0;
    this.overflowLogged = false;
    if (!this.ledger.empty) {
      const reports = this.ledger.take();
      setImmediate(() => reportDroppedRanges(reports, this, this.bus, this.logger));
    }
  }

  private dropOverflow(dropped: MetisEvent[]): void {
    this.stats.droppedEvents += dropped.length;
    if (!this.overflowLogged)
      this.logger.error(
        {
          events: dropped.length,
          first_id: dropped[0]!.id,
          last_id: dropped.at(-1)!.id,
          max_events: this.maxEvents,
          max_bytes: this.maxBytes,
        },
        'trace store buffer full while storage is unavailable; events dropped (reported as bus.gap_detected once storage is back)',
      );
    this.overflowLogged = true;
    this.waiters.dropped(dropped, () => storageError(this.currentFailure ?? 'busy', this.path));
    this.publish(this.dropListeners, dropped);
  }

  private publish(listeners: readonly CommitListener[], batch: readonly MetisEvent[]): void {
    for (const listener of listeners) {
      try {
        listener(batch);
      } catch (error) {
        this.logger.warn({ err: (error as Error).message }, 'commit listener failed');
      }
    }
  }
}
