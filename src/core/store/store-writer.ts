import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import type { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import type { RowWrite } from './batch-committer.js';
import type { StorageFailure } from './storage-errors.js';

/**
 * How long a request's first event may wait for storage before the request is refused (503/507): the
 * HTTP acknowledgement (stream/commit-ack.ts) and the runtime's start gate wait the same.
 */
export const DEFAULT_COMMIT_WAIT_MS = 5000;

/** Told of events once committed (or, for `onDrop`, once given up). */
export type CommitListener = (events: readonly MetisEvent[]) => void;

/** What `onBatch` observers learn of each batch: for metrics, so they never touch the write path. */
export interface BatchReport {
  readonly events: readonly MetisEvent[];
  /** Time spent in the transaction that committed the batch (0 for events dropped without one). */
  readonly durationMs: number;
  readonly outcome: 'committed' | 'dropped';
}
export type BatchListener = (report: BatchReport) => void;

/** What the writer counted since it started (`GET /metrics`). */
export interface StoreWriterStats {
  committedEvents: number;
  committedBatches: number;
  droppedEvents: number;
  retries: number;
  /** Events and rows refused by a non-transient error (a constraint), each dropped alone. */
  rejectedRows: number;
}

/**
 * What the rest of the server needs of a store's writer (docs/plans/store-port.md step 2): the events
 * of the bus and the row writes queued in one order and group-committed, acknowledgements once stored,
 * and the state of storage. `TraceWriter` (SQLite) is one; a PostgreSQL writer will be another. Nothing
 * above the store names the class.
 */
export interface StoreWriter {
  readonly stats: StoreWriterStats;
  /** Subscribes to every event on the bus, on the fast path. */
  attach(bus: EventBus): SubscriptionHandle;
  /** Called with each batch of events once committed; returns the unsubscribe. */
  onCommit(listener: CommitListener): () => void;
  /** Called with the events dropped: past the buffer's bound, or refused one by one. */
  onDrop(listener: CommitListener): void;
  /** Observes every batch once it is settled, committed or dropped (metrics); returns the unsubscribe. */
  onBatch(listener: BatchListener): () => void;
  /** The storage failure the writer is waiting out, or null when storage is writable. */
  readonly failure: StorageFailure | null;
  /**
   * The error a request is refused with because of storage: the failure being waited out, or a commit
   * that took too long (busy). Names the store as its adapter knows it (a file, a server).
   */
  storageRefusal(): MetisError;
  /** Events and rows waiting to be committed. */
  readonly buffered: { events: number; bytes: number; items: number };
  /** Queues one tick's events. */
  write(events: readonly MetisEvent[]): void;
  /** Queues a row write behind every event and row already queued. Rows are never dropped. */
  writeRow(row: RowWrite): void;
  /**
   * Resolves once `eventId` is committed. Rejects with the storage error when it was dropped, or when it
   * is still waiting after `timeoutMs` (0: no limit).
   */
  whenCommitted(eventId: string, timeoutMs?: number): Promise<void>;
  /** Resolves once nothing waits to be committed; with a timeout, resolves false if still waiting. */
  idle(timeoutMs?: number): Promise<boolean>;
  /** Stops retrying (the store is about to close); whatever still waits is abandoned. */
  close(): void;
}
