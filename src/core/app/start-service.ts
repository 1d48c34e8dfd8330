import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { loadPlugins } from '../../plugins/load-plugins.js';
import { type PluginEnvironment, type PluginHost, startPlugins } from '../../plugins/plugin-host.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { ClusterSettings, JoinedNode } from '../cluster/cluster-start.js';
import type { MetisConfig } from '../config/schema.js';
import { resolveServerAuth, type ServerAuth, tokenFilePath } from '../http/local-token.js';
import { isLoopbackBind } from '../http/security.js';
import { ChildProcessRecord } from '../runtime/child-process-record.js';
import type { RecoveryReport } from '../runtime/crash-recovery.js';
import { resumeCutTurns } from '../runtime/resume-cut-turns.js';
import { createRuntime, type Runtime } from '../runtime/runtime.js';
import type { DetectedGap } from '../store/gap-detector.js';
import type { StoreContext } from '../store/store-context.js';
import type { TraceContext } from '../store/trace-context.js';
import type { FaultName } from '../stream/faults.js';
import { ClusterSeat } from './cluster-seat.js';
import { conformanceRuntime, seamPause } from './conformance-mode.js';
import { dashboardFolder } from './dashboard-folder.js';
import { defaultModelRefusal } from './default-model-refusal.js';
import { joinCluster } from './join-cluster.js';
import type { MetisServer } from './metis-server.js';
import { type LockedStores, lockStores, openAndRecover, type RecoveredTrace } from './open-stores.js';
import { startServiceServer } from './service-server.js';
import { serviceStop } from './service-stop.js';

/** A running `metis serve`; `C` is its store (the SQLite trace context unless it runs on PostgreSQL alone). */
export interface RunningService<C extends StoreContext = TraceContext> {
  readonly url: string;
  /** The SQLite file the server runs on: the store, or the working copy of a PostgreSQL store. */
  readonly dbPath: string;
  /** The PostgreSQL store (password hidden), or null on the embedded store. */
  readonly store: string | null;
  readonly gaps: readonly DetectedGap[];
  /** What the last run left open and this start closed. */
  readonly recovery: RecoveryReport;
  readonly runtime: Runtime;
  readonly trace: C;
  readonly server: MetisServer;
  readonly plugins: PluginHost;
  /** This node of a cluster (`cluster.nats`), or null. */
  readonly cluster: ClusterNode | null;
  /** How clients authenticate: the token and where it came from (the banner shows the file, never the token). */
  readonly auth: ServerAuth;
  /** The dashboard's sign-in link (a single-use code, never the token); null when none is served. */
  readonly dashboardUrl: string | null;
  /**
   * Graceful stop: stop accepting, cancel in-flight turns, stop the plugins, flush the trace writer,
   * close clients, close the database, release the lock. Settles within `server.shutdown_timeout_ms`
   * whatever a plugin does: a step still running at the deadline is abandoned and logged by name, and the database is closed and the lock released regardless. Safe to call twice.
   */
  stop(options?: { handOver?: boolean }): Promise<void>;
  /**
   * Closes the database and releases the lock now, without waiting for anything: for a second signal
   * or a shutdown that overran its bound. Safe to call at any time, and twice.
   */
  abandon(): void;
}

export interface ServiceOptions {
  conformance?: { faults: readonly FaultName[] };
  /** The config file `config` came from: plugin paths are relative to its folder. */
  configPath?: string | null;
  /** The local token file when config and environment name no token (default `$METIS_HOME/token`). */
  tokenFile?: string;
  /** How `config.store.url` was given (`--store`, `$METIS_STORE_URL`), for errors; default `store.url`. */
  storeSetting?: string;
  /** How the cluster settings were given (`--nats`, `--node-id`), for errors. */
  clusterSettings?: ClusterSettings;
}

/**
 * Everything `metis serve` runs, in stages: lock the data (and reach the cluster's broker and the
 * PostgreSQL store), open the trace store and recover what a crash left, start the plugins named in
 * config, the runtime, the server, then join the cluster. A stage that fails undoes those before it.
 * @throws MetisError METIS_ERR_DB_LOCKED when another metis holds the database; METIS_ERR_PLUGIN_* when
 *   a plugin cannot be found, exports the wrong shape, gets bad options or fails to start.
 */
export async function startService(
  config: MetisConfig,
  dbPath: string,
  logger: Logger,
  options: ServiceOptions = {},
): Promise<RunningService> {
  // Before the lock: a token file others can read or `auth: none` on 0.0.0.0 must stop the start early.
  const auth = serviceAuth(config, options, logger);
  const dashboard = dashboardFolder(config.server.dashboard);
  const stores = await lockStores(config, dbPath, logger, {
    storeSetting: options.storeSetting ?? 'store.url',
    clusterSettings: options.clusterSettings,
  });
  let recovered: RecoveredTrace | null = null;
  let plugins: PluginHost | null = null;
  let server: MetisServer | null = null;
  let joined: JoinedNode | null = null;
  try {
    recovered = await openAndRecover(config, stores, logger);
    const { trace } = recovered;
    plugins = await startConfiguredPlugins(
      config,
      { bus: trace.bus, store: trace.store },
      dirname(dbPath),
      logger,
      options.configPath ?? null,
    );
    const seat = new ClusterSeat(stores.prepared !== null, trace.port.sessions);
    const runtime = startRuntime(
      config,
      trace,
      { childRecordFile: recovered.childRecordFile, protectedPath: stores.tracePath },
      seat,
      logger,
      options,
    );
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
    if (stores.prepared !== null) {
      joined = await joinCluster({
        prepared: stores.prepared,
        seat,
        server,
        trace,
        runtime,
        sessions: trace.port.sessions,
        token: auth.token,
        recovered: recovered.recoveredEvents,
        pricingVersion: config.runtime.pricing_version,
        logger,
      });
      seat.node = joined;
    }
    // The turns the last run left open go on, so a client coming back finds them running. On a single
    // node before any request is read (the server listened, but reads nothing before this tick ends);
    // a cluster node once it has joined, so that the other nodes' clients get the resumed turns' events.
    const queued = trace.port.queues.queuedSessions();
    resumeCutTurns(runtime, recovered.recovery.resumable, logger, 'at start', queued);
    const { stop, abandon } = serviceStop({
      server,
      runtime,
      plugins,
      trace,
      cluster: seat.node,
      store: stores.store,
      release: stores.release,
      shutdownTimeoutMs: config.server.shutdown_timeout_ms,
      keepTurns: config.runtime.on_restart === 'resume',
      logger,
    });
    return {
      url: server.url,
      dashboardUrl: dashboard === null ? null : server.signInLink(),
      dbPath: stores.tracePath,
      store: stores.store?.copy.label ?? null,
      gaps: recovered.gaps,
      recovery: recovered.recovery,
      runtime,
      trace,
      server,
      plugins,
      cluster: seat.node,
      auth,
      abandon,
      stop,
    };
  } catch (error) {
    // A start that failed after the server listened (joining the cluster) must not leave it answering.
    await server?.close().catch(() => {});
    await plugins?.stop();
    await joined?.close();
    // Not joined: the prepared node still holds its broker connection.
    if (joined === null) await stores.prepared?.abort();
    await recovered?.trace.close();
    stores.release();
    await stores.store?.close();
    throw error;
  }
}

/**
 * The plugins named in config, loaded (paths relative to the config file) and started on the bus, reading
 * the trace from `trace.store`: a SQLite store, or a store with no file here (start-direct.ts).
 */
export async function startConfiguredPlugins(
  config: MetisConfig,
  trace: Pick<PluginEnvironment, 'bus' | 'store'>,
  dataDir: string,
  logger: Logger,
  configPath: string | null,
): Promise<PluginHost> {
  const timeouts = config.plugin_timeouts;
  return startPlugins(await loadPlugins(config.plugins, { configPath, loadTimeoutMs: timeouts.load_ms }), {
    bus: trace.bus,
    store: trace.store,
    logger,
    dataDir,
    timeouts: { startMs: timeouts.start_ms, handlerMs: timeouts.handler_ms, stopMs: timeouts.stop_ms },
  });
}

/**
 * The runtime on the recovered trace store; it resumes only the sessions this node runs.
 * @throws MetisError METIS_ERR_INVALID_MODEL when no provider can serve the default model.
 */
export function startRuntime(
  config: MetisConfig,
  store: Pick<StoreContext, 'bus' | 'port'>,
  files: {
    /** Where the runtime records the tool processes it starts. */
    readonly childRecordFile: string;
    /** The store's file, which no tool may write (none on PostgreSQL alone). */
    readonly protectedPath: string | null;
  },
  seat: ClusterSeat,
  logger: Logger,
  options: ServiceOptions,
): Runtime {
  const runtimeConfig = options.conformance ? conformanceRuntime(config.runtime) : config.runtime;
  const configPath = options.configPath ?? null;
  const runtime = createRuntime({
    mayResume: (sessionId) => seat.runsHere(sessionId),
    bus: store.bus,
    store: store.port,
    config: runtimeConfig,
    logger,
    childProcesses: new ChildProcessRecord(files.childRecordFile, logger),
    protectedPaths: [
      ...(configPath === null ? [] : [configPath]),
      ...(files.protectedPath === null ? [] : [files.protectedPath]),
    ],
    beforeToolExecute: options.conformance ? seamPause : undefined,
  });
  // A default no provider can serve would fail every turn that names no model: refuse to start.
  const served = runtime.models.resolve(runtimeConfig.default_model);
  if (!served.ok) throw defaultModelRefusal(runtimeConfig, served);
  return runtime;
}

/** The server's authentication, resolved before anything is locked: a bad token file stops the start. */
export function serviceAuth(config: MetisConfig, options: ServiceOptions, logger: Logger): ServerAuth {
  const auth = resolveServerAuth(config.server, {
    loopback: isLoopbackBind(config.server.host),
    tokenFile: options.tokenFile ?? tokenFilePath(),
  });
  if (auth.mode === 'token' && auth.deprecation !== null) logger.warn(auth.deprecation);
  if (auth.mode === 'none') logger.warn('server.auth: none: any local user can drive this server');
  return auth;
}
