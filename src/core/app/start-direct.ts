import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import type { PluginHost } from '../../plugins/plugin-host.js';
import { type JoinedNode, prepareCluster } from '../cluster/cluster-start.js';
import type { MetisConfig } from '../config/schema.js';
import { killLeftoverChildren } from '../runtime/child-process-record.js';
import { type RecoveryOptions, type RecoveryReport, recoverCutTurns } from '../runtime/crash-recovery.js';
import { openAndResumeCutTurns, resumeCutTurns } from '../runtime/resume-cut-turns.js';
import { LeaseTable } from '../store/postgres/lease-table.js';
import { openPostgresContext, type PostgresContext } from '../store/postgres/pg-context.js';
import { PgOpenWork } from '../store/postgres/pg-open-work.js';
import { PgStreamArchiveRows } from '../store/postgres/pg-stream-archive-rows.js';
import { pgTraceQueryReads } from '../store/postgres/pg-trace-query.js';
import type { StoreContext } from '../store/store-context.js';
import { ClusterSeat } from './cluster-seat.js';
import { dashboardFolder } from './dashboard-folder.js';
import { joinClusterOnStore, leasedRecoveryReport, recoverLeasedFamilies } from './join-cluster-on-store.js';
import type { MetisServer } from './metis-server.js';
import { startServiceServer } from './service-server.js';
import { serviceStop } from './service-stop.js';
import {
  type RunningService,
  type ServiceOptions,
  serviceAuth,
  startConfiguredPlugins,
  startRuntime,
} from './start-service.js';

/**
 * Whether `metis serve` runs on PostgreSQL alone: `store.working_copy: false`, or unset on a server
 * that joins no cluster (a cluster node still needs its working copy).
 */
export function runsOnPostgresAlone(config: MetisConfig): boolean {
  if (config.store.url === null) return false;
  const { working_copy: workingCopy } = config.store;
  if (workingCopy !== null) return !workingCopy;
  return config.cluster.nats === null;
}

/**
 * `metis serve` on PostgreSQL with no working copy (`store.working_copy: false`, docs/storage.md): the
 * store's context, recovery of what a crash left from PostgreSQL, the runtime, the turns it resumes, and
 * the configured plugins (reading the trace from PostgreSQL: docs/plugins.md), then the server. A
 * cluster node (`cluster.nats` with `store.working_copy: false`, step 9) holds its sessions by leases
 * whose tokens fence its writes, recovers the families still leased to it once its runtime runs, and
 * joins once the server listens (join-cluster-on-store.ts).
 * @throws MetisError naming the setting for a cluster that cannot be joined, or a store that cannot be used;
 *   METIS_ERR_DB_LOCKED when another server holds it; METIS_ERR_PLUGIN_START for a plugin that fails.
 */
export async function startDirectService(
  config: MetisConfig,
  dbPath: string,
  logger: Logger,
  options: ServiceOptions = {},
): Promise<RunningService<StoreContext>> {
  const url = config.store.url!;
  const auth = serviceAuth(config, options, logger);
  const dashboard = dashboardFolder(config.server.dashboard);
  // A cluster node (step 9, behind working_copy: false): its name checked and its broker reached first.
  const prepared = await prepareCluster(config, dirname(dbPath), logger, options.clusterSettings);
  let seat: ClusterSeat | null = null;
  // A node's leases, by family root: its writer's fence (the seat places a session in its family).
  const cluster =
    prepared === null
      ? null
      : { prepared, leases: new LeaseTable((sessionId) => seat?.rootOf(sessionId) ?? null) };
  const trace = await openPostgresContext({
    url,
    setting: options.storeSetting ?? 'store.url',
    logger,
    validation: config.bus.validation ?? undefined,
    queueLimit: config.bus.queue_limit,
    ...(cluster === null ? {} : { lease: { nodeId: cluster.prepared.nodeId, table: cluster.leases } }),
  }).catch(async (error: unknown) => {
    await prepared?.abort();
    throw error;
  });
  let server: MetisServer | null = null;
  let plugins: PluginHost | null = null;
  let joined: JoinedNode | null = null;
  try {
    const childRecordFile = join(dirname(dbPath), 'postgres.children');
    killLeftoverChildren(childRecordFile, logger);
    const recoveryOptions = {
      pricingVersion: config.runtime.pricing_version,
      logger,
      onRestart: config.runtime.on_restart,
      maxResumptions: config.runtime.max_resumptions,
    };
    // A cluster node recovers the families leased to it once its runtime can load them (below).
    const recovered = cluster === null ? await recoverOnPostgres(trace, recoveryOptions) : null;
    // Plugins read the trace from PostgreSQL, synchronously only where memory answers exactly.
    plugins = await startConfiguredPlugins(
      config,
      { bus: trace.bus, store: { reads: pgTraceQueryReads(trace.pool), writer: trace.writer } },
      dirname(dbPath),
      logger,
      options.configPath ?? null,
    );
    seat = new ClusterSeat(cluster !== null, trace.port.sessions, trace.port.sessionReads);
    // Only a node places workers in families (its leases and subjects are by root): no listener per
    // emit on a single server.
    if (cluster !== null) trace.onClose(seat.learnRoots(trace.bus));
    const runtime = startRuntime(
      config,
      trace,
      { childRecordFile, protectedPath: null },
      seat,
      logger,
      options,
    );
    const leased =
      cluster === null
        ? null
        : await recoverLeasedFamilies({
            trace,
            runtime,
            leases: cluster.leases,
            nodeId: cluster.prepared.nodeId,
            durableTurns: cluster.prepared.durableTurns,
            pricingVersion: config.runtime.pricing_version,
            logger,
          });
    const recovery = recovered ?? leasedRecoveryReport(leased!);
    // Before the server reads a request: a client coming back finds its cut turn running again. A
    // cluster node's, once it has joined: the other nodes' clients get the resumed turns' events.
    const queued = trace.port.queues.queuedSessions();
    if (leased === null) await openAndResumeCutTurns(runtime, recovery.resumable, logger, 'at start', queued);
    server = await startServiceServer({
      config,
      runtime,
      trace,
      plugins,
      seat,
      auth,
      dashboard,
      conformance: options.conformance,
      logger,
    });
    if (cluster !== null && leased !== null) {
      joined = await joinClusterOnStore({
        ...cluster,
        seat,
        server,
        trace,
        runtime,
        token: auth.token,
        recovered: leased.events,
        pricingVersion: config.runtime.pricing_version,
        logger,
      });
      seat.node = joined;
      resumeCutTurns(runtime, leased.resumable, logger, 'at start', leased.sessionIds);
    }
    const { stop, abandon } = serviceStop({
      server,
      runtime,
      plugins,
      trace,
      cluster: joined,
      store: null,
      release: () => {},
      shutdownTimeoutMs: config.server.shutdown_timeout_ms,
      keepTurns: config.runtime.on_restart === 'resume',
      logger,
    });
    return {
      url: server.url,
      dashboardUrl: dashboard === null ? null : server.signInLink(),
      dbPath: '',
      store: trace.label,
      gaps: [],
      recovery,
      runtime,
      trace,
      server,
      plugins,
      cluster: joined,
      auth,
      abandon,
      stop,
    };
  } catch (error) {
    await server?.close().catch(() => {});
    await plugins?.stop();
    await joined?.close();
    // Not joined: the prepared node still holds its broker connection.
    if (joined === null) await prepared?.abort();
    await trace.close();
    throw error;
  }
}

/**
 * What a crash left open in PostgreSQL, read and closed (or planned to resume) through the context's
 * bus and write-only rows, and committed before the runtime starts.
 */
export async function recoverOnPostgres(
  trace: PostgresContext,
  options: RecoveryOptions,
): Promise<RecoveryReport> {
  const recovery = await recoverCutTurns(
    new PgOpenWork(trace.pool),
    {
      bus: trace.bus,
      sessions: trace.port.sessions,
      archive: new PgStreamArchiveRows(trace.pool, trace.writer),
    },
    options,
  );
  await trace.flush();
  return recovery;
}
