import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { type ClusterSettings, type PreparedCluster, prepareCluster } from '../cluster/cluster-start.js';
import type { MetisConfig } from '../config/schema.js';
import type { MetisEvent } from '../events/envelope.js';
import { killLeftoverChildren } from '../runtime/child-process-record.js';
import { type RecoveryReport, recoverCrashedTurns } from '../runtime/crash-recovery.js';
import type { DetectedGap } from '../store/gap-detector.js';
import { acquireLock } from '../store/lock.js';
import { watchHandoffs } from '../store/owner-handoffs.js';
import {
  openPostgresStore,
  type PostgresServeStore,
  workingCopyFile,
} from '../store/postgres/serve-store.js';
import { selfAndDescendants } from '../store/session-lineage.js';
import { openTraceContext, reportGaps, type TraceContext } from '../store/trace-context.js';

export interface LockedStores {
  /** The SQLite file the server runs on: the store, or the working copy of a PostgreSQL store. */
  readonly tracePath: string;
  /** Releases the lock on `tracePath`. */
  readonly release: () => void;
  readonly store: PostgresServeStore | null;
  /** The cluster node before it joins; null on a single node. */
  readonly prepared: PreparedCluster | null;
}

/**
 * The first stage of the start: lock the data, then (in a cluster) check the node's name and reach
 * its broker, then open the PostgreSQL store. What succeeded is undone when a later step fails.
 */
export async function lockStores(
  config: MetisConfig,
  dbPath: string,
  logger: Logger,
  settings: { storeSetting: string; clusterSettings?: ClusterSettings },
): Promise<LockedStores> {
  // On PostgreSQL the server runs on a working copy of the store in the data folder (working-copy.ts),
  // locked like the database file before it is checked or rebuilt.
  const tracePath =
    config.store.url === null
      ? dbPath
      : workingCopyFile(config.store.url, settings.storeSetting, dirname(dbPath));
  const release = acquireLock(tracePath);
  let prepared: PreparedCluster | null = null;
  try {
    prepared = await prepareCluster(config, dirname(dbPath), logger, settings.clusterSettings);
    const nodeId = prepared?.nodeId ?? null;
    const store =
      config.store.url === null
        ? null
        : await openPostgresStore(config.store.url, settings.storeSetting, dirname(dbPath), logger, nodeId);
    return { tracePath, release, store, prepared };
  } catch (error) {
    release();
    await prepared?.abort();
    throw error;
  }
}

export interface RecoveredTrace {
  readonly trace: TraceContext;
  /** What the last run left open and this start closed. */
  readonly recovery: RecoveryReport;
  readonly gaps: readonly DetectedGap[];
  /**
   * The session events the recovery committed (in a cluster only): the other nodes' clients learn from
   * them how the cut turns ended (join-cluster.ts publishes them).
   */
  readonly recoveredEvents: readonly MetisEvent[];
  /** Where the runtime records the tool processes it starts, for the next start to find. */
  readonly childRecordFile: string;
}

/**
 * The trace store opened, and what a crash left behind closed before anything else runs: tool
 * processes still running, then turns without an end (docs/decisions.md "Turns a crash cut").
 */
export async function openAndRecover(
  config: MetisConfig,
  stores: LockedStores,
  logger: Logger,
): Promise<RecoveredTrace> {
  const trace = openTraceContext({
    dbPath: stores.tracePath,
    logger,
    validation: config.bus.validation ?? undefined,
    queueLimit: config.bus.queue_limit,
    synchronous: config.storage.synchronous,
    upstream: stores.store?.upstream,
  });
  try {
    const childRecordFile = `${stores.tracePath}.children`;
    killLeftoverChildren(childRecordFile, logger);
    // A node recovers only the sessions it ran (their leases name it): the copy holds every node's,
    // and the turns other nodes run look open in it.
    const sessions =
      stores.prepared === null
        ? undefined
        : (await stores.prepared.leasedHere()).flatMap((root) =>
            selfAndDescendants(trace.port.sessions, root),
          );
    const before = trace.store.lastEventId();
    const recovery = await recoverCrashedTurns(trace.db, trace.bus, {
      pricingVersion: config.runtime.pricing_version,
      logger,
      onRestart: config.runtime.on_restart,
      maxResumptions: config.runtime.max_resumptions,
      ...(sessions === undefined ? {} : { sessions }),
    });
    await trace.flush();
    const recoveredEvents = stores.prepared === null ? [] : trace.store.eventsAfter(before);
    const gaps = await reportGaps(trace);
    for (const gap of gaps) logger.warn({ ...gap }, 'trace store gap detected at startup');
    watchHandoffs(trace, { logger }); // what a prune beside this server hands it to record; stops on close
    // A prune of the PostgreSQL store while this server runs: the same rows leave the working copy.
    if (stores.store !== null) trace.onClose(stores.store.followSweeps());
    return { trace, recovery, gaps, recoveredEvents, childRecordFile };
  } catch (error) {
    await trace.close();
    throw error;
  }
}
