import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { SessionRouter } from '../http/session-router.js';
import type { Runtime } from '../runtime/runtime.js';
import type { StreamReads } from '../store/stream-reads.js';
import type { TraceLookups } from '../store/trace-lookups.js';
import type { FaultSwitches } from './faults.js';
import type { StreamHub } from './stream-hub.js';

export interface StreamOptions {
  readonly maxQueueEvents: number;
  readonly maxQueueBytes: number;
  readonly replayCap: number;
  readonly heartbeatIntervalMs: number;
  readonly retentionDays: number;
  /** Socket buffer above which queued frames wait for 'drain'. */
  readonly socketHighWaterMark: number;
}

/** Why a connection closed, as `metis_stream_closes_total` counts it. */
export type CloseCause =
  | 'client_too_slow'
  | 'heartbeat_timeout'
  | 'client_closed'
  | 'protocol_error'
  | 'shutdown'
  | 'broker_unavailable'
  /** The store's reads of a subscribe failed, or could not keep up with what was released meanwhile. */
  | 'store_unavailable'
  /** A turn's own stream (AI SDK, AG-UI) that ended with its turn. */
  | 'turn_ended';
export type ReplayOutcome = 'served' | 'cursor_expired' | 'replay_too_large';

/**
 * What a connection reports to the server's metrics (metrics.ts). Called on rare transitions only (a
 * close, a warning, a subscribe), never per event; queue depths are read at scrape time instead.
 */
export interface StreamCounters {
  connectionClosed(cause: CloseCause): void;
  lagWarning(): void;
  replay(outcome: ReplayOutcome, events: number): void;
}

export const NO_COUNTERS: StreamCounters = {
  connectionClosed: () => undefined,
  lagWarning: () => undefined,
  replay: () => undefined,
};

/** What the server reads of an open connection: its queue (metrics) and its close (shutdown). */
export interface OpenConnection {
  /** The session the client attached to. */
  readonly sessionId: string;
  queueDepth(): { events: number; bytes: number };
  shutdown(): void;
}

/** What every client connection of a server shares (app/metis-server.ts builds it once per connection). */
export interface ConnectionDeps {
  readonly hub: StreamHub;
  /** Where a turn started and ended, for a turn stream's rejoin and an AG-UI run's state. */
  readonly lookups: TraceLookups;
  /** What a subscribe reads of the store (snapshot, replay, cursor checks), asynchronously. */
  readonly reads: StreamReads;
  readonly runtime: Runtime;
  readonly bus: EventBus;
  readonly options: StreamOptions;
  readonly logger: Logger;
  /** `--conformance --fault …`: installed around the connection's parts (faults.ts), never per event. */
  readonly faults?: FaultSwitches;
  readonly counters?: StreamCounters;
  /**
   * Told of every connection as it opens, whatever its transport; the function it returns is called
   * once the connection closed. The server keeps its open connections so (metrics, shutdown).
   */
  readonly opened?: (connection: OpenConnection) => () => void;
  /**
   * A cluster: runs a request on the node that runs the session, and resolves with its answer's status
   * and body; null when this node runs it (or may take it), and the request is run here.
   */
  readonly runElsewhere?: SessionRouter['runElsewhere'];
}
