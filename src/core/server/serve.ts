import type { Logger } from 'pino';
import type { MetisConfig } from '../config/schema.js';
import { createRuntime, type Runtime } from '../runtime/runtime.js';
import type { DetectedGap } from '../store/gap-detector.js';
import { acquireLock } from '../store/lock.js';
import { openTraceContext, reportGaps, type TraceContext } from '../store/trace-context.js';
import type { FaultSwitches } from './faults.js';
import { type MetisServer, startServer } from './server.js';

export interface RunningService {
  readonly url: string;
  readonly dbPath: string;
  readonly gaps: readonly DetectedGap[];
  readonly runtime: Runtime;
  readonly trace: TraceContext;
  readonly server: MetisServer;
  /**
   * Graceful stop: stop accepting, close clients, cancel in-flight turns, flush the trace writer,
   * close the database, release the lock. Safe to call twice.
   */
  stop(): Promise<void>;
}

/**
 * Everything `metis serve` runs, in order: lock the database, open the trace store (gap detection),
 * the runtime and the server.
 * @throws MetisError METIS_ERR_DB_LOCKED when another metis holds the database.
 */
export async function startService(
  config: MetisConfig,
  dbPath: string,
  logger: Logger,
  options: { faults?: FaultSwitches } = {},
): Promise<RunningService> {
  const release = acquireLock(dbPath);
  let trace: TraceContext | null = null;
  try {
    trace = openTraceContext({
      dbPath,
      logger,
      validation: config.bus.validation ?? undefined,
      queueLimit: config.bus.queue_limit,
      synchronous: config.storage.synchronous,
    });
    const gaps = await reportGaps(trace);
    for (const gap of gaps) logger.warn({ ...gap }, 'trace store gap detected at startup');
    const runtime = createRuntime({ bus: trace.bus, db: trace.db, config: config.runtime, logger });
    const server = await startServer(runtime, trace, {
      host: config.server.host,
      port: config.server.port,
      bearerToken: config.server.bearer_token ?? process.env.METIS_BEARER_TOKEN ?? null,
      allowedOrigins: config.server.allowed_origins,
      attachTokenTtlMs: config.server.attach_token_ttl_ms,
      stream: {
        maxQueueEvents: config.server.max_queue_events,
        maxQueueBytes: config.server.max_queue_bytes,
        replayCap: config.server.replay_cap,
        heartbeatIntervalMs: config.server.heartbeat_interval_ms,
        retentionDays: config.storage.retention_days,
      },
      faults: options.faults,
      logger,
    });
    const opened = trace;
    let stopping: Promise<void> | null = null;
    return {
      url: server.url,
      dbPath,
      gaps,
      runtime,
      trace: opened,
      server,
      stop: () => {
        stopping ??= (async () => {
          await server.close();
          await runtime.close();
          await opened.close();
          release();
        })();
        return stopping;
      },
    };
  } catch (error) {
    await trace?.close();
    release();
    throw error;
  }
}
