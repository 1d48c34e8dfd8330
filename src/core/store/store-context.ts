import type { EventBus } from '../bus/event-bus.js';
import type { GatewaySpendRow } from './gateway-spend.js';
import type { StorageStall } from './storage-stall.js';
import type { SessionRows, StorePort } from './store-port.js';
import type { StoreUpstream } from './store-upstream.js';
import type { StoreWriter } from './store-writer.js';
import type { StreamArchiveRows } from './stream-archive-rows.js';
import type { StreamReads } from './stream-reads.js';
import type { TraceContentReads } from './trace-content-rows.js';
import type { WholeStoreReads } from './whole-store-reads.js';

/**
 * What the server reads of its store besides the runtime's port: every read asynchronous, so that a store
 * over the network answers them as the SQLite file does (docs/plans/store-port.md, step 8).
 */
export interface ServerReads {
  /** What subscriptions read (snapshot, replay, cursor checks), over the runtime's session rows. */
  stream(sessions: SessionRows): StreamReads;
  /** Rows of the stream archive (a reconnect's deltas); one per server. */
  archiveRows(): StreamArchiveRows;
  /** A session's trace page besides its events' stream. */
  readonly traceContent: TraceContentReads;
  /** The sessions list, usage and store statistics. */
  readonly wholeStore: WholeStoreReads;
  /**
   * Gateway calls stored since `sinceUs`, which the gateway's quotas start from. A shared store answers
   * none here: its nodes read the shared spend instead (pg-gateway-spend.ts).
   */
  gatewaySpendSince(sinceUs: number): readonly GatewaySpendRow[];
}

/**
 * A store as the server runs on it, whatever the backend: the bus whose events it commits, the runtime's
 * port, the writer, and the server's reads. The SQLite trace context (trace-context.ts) is one; a
 * PostgreSQL store with no working copy (postgres/pg-context.ts) is the other.
 */
export interface StoreContext {
  readonly bus: EventBus;
  /** What the runtime reads and writes besides events. */
  readonly port: StorePort;
  /** What commits the bus's events and the row writes, in one order. */
  readonly writer: StoreWriter;
  /** The PostgreSQL store a SQLite working copy ships to; null otherwise (goes with the working copy). */
  readonly upstream: StoreUpstream | null;
  readonly reads: ServerReads;
  /** How errors and logs name the store: the file's path, or the PostgreSQL URL without its password. */
  readonly label: string;
  /** A read's failure as the storage error a client is answered (503/507 naming the store), else itself. */
  storageErrorOf(error: unknown): unknown;
  /** The server listens: waits on the store become the short ones of a serving loop. */
  serving(): void;
  /** Holds every write back for a while (the conformance suite's storage stall). */
  readonly stall: StorageStall;
  /** Waits until every emitted event is dispatched and committed. */
  flush(): Promise<void>;
  /** Runs the close hooks, flushes (bounded while storage is away), and closes the store. Safe twice. */
  close(): Promise<void>;
  /** Runs `hook` at the start of `close()`, before the final flush. */
  onClose(hook: () => void | Promise<void>): void;
}
