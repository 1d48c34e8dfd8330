import type { Logger } from 'pino';
import type { PluginHost } from '../../plugins/plugin-host.js';
import type { JoinedNode } from '../cluster/cluster-start.js';
import { DeadlineExceeded, withDeadline } from '../deadline.js';
import type { Runtime } from '../runtime/runtime.js';
import type { PostgresServeStore } from '../store/postgres/serve-store.js';
import type { StoreContext } from '../store/store-context.js';
import type { TraceContext } from '../store/trace-context.js';
import type { MetisServer } from './metis-server.js';

/** Time kept back from the shutdown bound for the trace flush and closing the database. */
const CLOSE_RESERVE_MS = 1000;
/** What a drain leaves of the bound for the steps after it (plugins, flush, clients, database). */
const AFTER_DRAIN_RESERVE_MS = 2000;

export interface StoppableParts {
  readonly server: MetisServer;
  readonly runtime: Runtime;
  readonly plugins: PluginHost;
  readonly trace: StoreContext;
  readonly cluster: JoinedNode | null;
  readonly store: PostgresServeStore | null;
  /** Releases the data folder's lock. */
  readonly release: () => void;
  readonly shutdownTimeoutMs: number;
  /**
   * `runtime.on_restart: resume`: running turns are drained, then handed over to the next start
   * (docs/runtime.md "Durable turns") instead of cancelled.
   */
  readonly keepTurns?: boolean;
  readonly logger: Logger;
}

export interface ServiceStop {
  /**
   * The graceful stop, bounded by `server.shutdown_timeout_ms`; safe to call twice. Running turns are
   * cancelled, unless `handOver` (SIGTERM) and `keepTurns`: then they drain and the rest are handed over.
   */
  stop(options?: { handOver?: boolean }): Promise<void>;
  /** Closes the database and releases the lock now, without waiting for anything. */
  abandon(): void;
}

/**
 * The stop of a running service, in order: stop accepting, cancel in-flight turns (clients still see
 * the cancellation), stop the plugins, flush the trace, close the clients, close the database, leave
 * the cluster. Each step is bounded by what is left of the deadline; one still running at it is
 * abandoned and logged by name, and the database is closed and the lock released regardless.
 */
export function serviceStop(parts: StoppableParts): ServiceStop {
  const { server, runtime, plugins, trace, cluster, logger } = parts;
  const abandon = () => {
    try {
      // A writer still waiting out an outage would retry against the closed connection for ever.
      trace.writer.close();
      const db = (trace as Partial<TraceContext>).db;
      if (db?.open) db.close();
    } catch (error) {
      logger.error({ err: (error as Error).message }, 'closing the database at a forced stop failed');
    } finally {
      parts.release();
      void cluster?.close();
      void parts.store?.close();
    }
  };
  let stopping: Promise<void> | null = null;
  const stop = (options: { handOver?: boolean } = {}) => {
    stopping ??= (async () => {
      const deadline = Date.now() + parts.shutdownTimeoutMs;
      /** Runs one step, but never past the deadline (less what closing needs). */
      const step = async (name: string, work: () => Promise<unknown>, reserve = CLOSE_RESERVE_MS) => {
        try {
          await withDeadline(work(), Math.max(0, deadline - reserve - Date.now()), name);
        } catch (error) {
          if (!(error instanceof DeadlineExceeded)) throw error;
          logger.error({ step: name }, `shutdown: ${name} still running at the deadline; abandoned`);
        }
      };
      try {
        if (parts.keepTurns && options.handOver === true) {
          // Still listening while turns drain: a new turn gets 503 METIS_ERR_SERVER_DRAINING, a client
          // following a running one can come back; what still runs at the end waits for the next start.
          const waitMs = Math.max(0, deadline - AFTER_DRAIN_RESERVE_MS - Date.now());
          await step('draining turns', () => runtime.close({ waitMs }), AFTER_DRAIN_RESERVE_MS - 500);
          if (runtime.handedOver > 0)
            logger.warn(
              { turns: runtime.handedOver },
              'shutdown: turns still running, handed over to the next start',
            );
        }
        // Cancel in-flight turns while clients are still attached, so they see the cancellation.
        server.stopAccepting();
        await step('cancelling turns', () => runtime.close());
        // Plugins before the trace flush: a plugin's stuck handler cannot hold the flush, which waits
        // for every mailbox (issue 12, observation 5).
        await step('stopping plugins', () => plugins.stop({ deadline: deadline - CLOSE_RESERVE_MS }));
        // While the store is away a flush would only wait out the shutdown bound and leave nothing
        // for the close, whose own bounded flush logs what is lost.
        if (trace.writer.failure === null) await step('flushing the trace', () => trace.flush());
        await step('closing client connections', () => server.close());
        await step('closing the database', () => trace.close(), 0);
        // After the last change is shipped: a node that takes this one's sessions over finds them whole.
        if (cluster !== null) await step('leaving the cluster', () => cluster.close(), 0);
      } finally {
        abandon();
      }
    })();
    return stopping;
  };
  return { stop, abandon };
}
