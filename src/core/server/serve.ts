import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { loadPlugins } from '../../plugins/load-plugins.js';
import { type PluginHost, startPlugins } from '../../plugins/plugin-host.js';
import { pluginsRoute } from '../../plugins/plugins-route.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { JoinedNode } from '../cluster/cluster-start.js';
import { type ClusterSettings, prepareCluster } from '../cluster/cluster-start.js';
import { takeOverSession } from '../cluster/take-over.js';
import type { MetisConfig } from '../config/schema.js';
import { DeadlineExceeded, withDeadline } from '../deadline.js';
import { MetisError } from '../errors.js';
import { ChildProcessRecord, killLeftoverChildren } from '../runtime/child-process-record.js';
import { type RecoveryReport, recoverCrashedTurns } from '../runtime/crash-recovery.js';
import { createRuntime, type Runtime } from '../runtime/runtime.js';
import { rootSession, selfAndDescendants } from '../runtime/session-lineage.js';
import type { DetectedGap } from '../store/gap-detector.js';
import { acquireLock } from '../store/lock.js';
import { watchHandoffs } from '../store/owner-handoffs.js';
import {
  openPostgresStore,
  type PostgresServeStore,
  workingCopyFile,
} from '../store/postgres/serve-store.js';
import { useRowIdBlock } from '../store/row-ids.js';
import { SessionStore } from '../store/session-store.js';
import {
  openTraceContext,
  reportGaps,
  type StoreUpstream,
  type TraceContext,
} from '../store/trace-context.js';
import type { ConnectionDeps } from './client-connection.js';
import { conformanceRoutes } from './conformance-hooks.js';
import { FAULT_NAMES, type FaultName, type FaultSwitches } from './faults.js';
import type { SessionGate } from './http-app.js';
import { resolveServerAuth, type ServerAuth, tokenFilePath } from './local-token.js';
import { isLoopbackBind } from './security.js';
import { type MetisServer, startServer } from './server.js';

/** Pause before each tool runs in `--conformance` mode (docs/conformance.md). */
export const SEAM_PAUSE_MS = 300;

/** What `--conformance` turns off or changes, said in the banner (issue 13, observation 7). */
export const CONFORMANCE_WARNING =
  'tools run WITHOUT confirmation, heartbeats every 250 ms, tool calls paused 300 ms, test routes open: for the conformance suite only, never for real work';

/** Tools run without confirmation and the scripted model streams fast, so checks take seconds. */
function conformanceRuntime(runtime: MetisConfig['runtime']): MetisConfig['runtime'] {
  return {
    ...runtime,
    tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
    scripted: { token_delay_ms: 1, slow_token_delay_ms: 10, slow_tokens: 400 },
  };
}

export interface RunningService {
  readonly url: string;
  /** The SQLite file the server runs on: the store, or the working copy of a PostgreSQL store. */
  readonly dbPath: string;
  /** The PostgreSQL store (password hidden), or null on the embedded store. */
  readonly store: string | null;
  readonly gaps: readonly DetectedGap[];
  /** What the last run left open and this start closed. */
  readonly recovery: RecoveryReport;
  readonly runtime: Runtime;
  readonly trace: TraceContext;
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
  stop(): Promise<void>;
  /**
   * Closes the database and releases the lock now, without waiting for anything: for a second signal
   * or a shutdown that overran its bound. Safe to call at any time, and twice.
   */
  abandon(): void;
}

/** Time kept back from the shutdown bound for the trace flush and closing the database. */
const CLOSE_RESERVE_MS = 1000;

/**
 * Everything `metis serve` runs, in order: lock the database, open the trace store (gap detection),
 * load and start the plugins named in config, the runtime and the server.
 * @throws MetisError METIS_ERR_DB_LOCKED when another metis holds the database; METIS_ERR_PLUGIN_* when
 *   a plugin cannot be found, exports the wrong shape, gets bad options or fails to start.
 */
export async function startService(
  config: MetisConfig,
  dbPath: string,
  logger: Logger,
  options: {
    conformance?: { faults: readonly FaultName[] };
    /** The config file `config` came from: plugin paths are relative to its folder. */
    configPath?: string | null;
    /** The local token file when config and environment name no token (default `$METIS_HOME/token`). */
    tokenFile?: string;
    /** How `config.store.url` was given (`--store`, `$METIS_STORE_URL`), for errors; default `store.url`. */
    storeSetting?: string;
    /** How the cluster settings were given (`--nats`, `--node-id`), for errors. */
    clusterSettings?: ClusterSettings;
  } = {},
): Promise<RunningService> {
  const conformance = options.conformance;
  const faults: Record<string, boolean> = {};
  for (const name of conformance?.faults ?? []) faults[FAULT_NAMES[name]] = true;
  // The conformance suite needs short heartbeats to test them in seconds.
  const heartbeatIntervalMs = conformance ? 250 : config.server.heartbeat_interval_ms;
  const maxQueueEvents = config.server.max_queue_events;
  // Before the lock: a token file others can read or `auth: none` on 0.0.0.0 must stop the start early.
  const auth = resolveServerAuth(config.server, {
    loopback: isLoopbackBind(config.server.host),
    tokenFile: options.tokenFile ?? tokenFilePath(),
  });
  if (auth.mode === 'token' && auth.deprecation !== null) logger.warn(auth.deprecation);
  if (auth.mode === 'none') logger.warn('server.auth: none: any local user can drive this server');
  const dashboard = dashboardFolder(config.server.dashboard);
  // On PostgreSQL the server runs on a working copy of the store in the data folder (working-copy.ts),
  // locked like the database file before it is checked or rebuilt.
  const storeSetting = options.storeSetting ?? 'store.url';
  const tracePath =
    config.store.url === null ? dbPath : workingCopyFile(config.store.url, storeSetting, dirname(dbPath));
  const release = acquireLock(tracePath);
  let store: PostgresServeStore | null = null;
  let prepared: Awaited<ReturnType<typeof prepareCluster>> = null;
  try {
    prepared = await prepareCluster(config, dirname(dbPath), logger, options.clusterSettings);
    store =
      config.store.url === null
        ? null
        : await openPostgresStore(
            config.store.url,
            storeSetting,
            dirname(dbPath),
            logger,
            prepared?.nodeId ?? null,
          );
  } catch (error) {
    release();
    await prepared?.abort();
    throw error;
  }
  let cluster: JoinedNode | null = null;
  const clustered = prepared !== null;
  let listening: MetisServer | null = null;
  let trace: TraceContext | null = null;
  let plugins: PluginHost | null = null;
  try {
    trace = openTraceContext({
      dbPath: tracePath,
      logger,
      validation: config.bus.validation ?? undefined,
      queueLimit: config.bus.queue_limit,
      synchronous: config.storage.synchronous,
      upstream: store?.upstream,
    });
    // What a crash left behind is closed before anything else runs: tool processes still running,
    // then turns without an end (docs/decisions.md "Turns a crash cut").
    const childRecordFile = `${tracePath}.children`;
    killLeftoverChildren(childRecordFile, logger);
    const opening = trace;
    // A node recovers only the sessions it ran (their leases name it): the copy holds every node's,
    // and the turns other nodes run look open in it.
    const recovery = recoverCrashedTurns(trace.db, trace.bus, {
      pricingVersion: config.runtime.pricing_version,
      logger,
      ...(prepared === null
        ? {}
        : {
            sessions: (await prepared.leasedHere()).flatMap((root) =>
              selfAndDescendants(new SessionStore(opening.db), root),
            ),
          }),
    });
    await trace.flush();
    const gaps = await reportGaps(trace);
    for (const gap of gaps) logger.warn({ ...gap }, 'trace store gap detected at startup');
    watchHandoffs(trace, { logger }); // what a prune beside this server hands it to record; stops on close
    const configPath = options.configPath ?? null;
    const pluginTimeouts = config.plugin_timeouts;
    plugins = await startPlugins(
      await loadPlugins(config.plugins, { configPath, loadTimeoutMs: pluginTimeouts.load_ms }),
      {
        bus: trace.bus,
        store: trace.store,
        logger,
        dataDir: dirname(dbPath),
        timeouts: {
          startMs: pluginTimeouts.start_ms,
          handlerMs: pluginTimeouts.handler_ms,
          stopMs: pluginTimeouts.stop_ms,
        },
      },
    );
    const runtimeConfig = conformance ? conformanceRuntime(config.runtime) : config.runtime;
    const sessionRecords = new SessionStore(trace.db);
    /** The session a worker's delegations descend from: the one leased for the whole family. */
    const rootOf = (sessionId: string): string => rootSession(sessionRecords, sessionId);
    /** Whether this node runs the session: it holds the lease of its family's root. */
    const runsHere = (sessionId: string): boolean => {
      if (!clustered) return true;
      if (cluster === null) return false;
      return cluster.holds(rootOf(sessionId));
    };
    const runtime = createRuntime({
      mayResume: runsHere,
      bus: trace.bus,
      db: trace.db,
      config: runtimeConfig,
      logger,
      childProcesses: new ChildProcessRecord(childRecordFile, logger),
      protectedPaths: [...(configPath === null ? [] : [configPath]), tracePath],
      // A fixed pause between tool.called and execution gives the suite a seam to cancel into.
      beforeToolExecute: conformance
        ? () => new Promise((resolve) => setTimeout(resolve, SEAM_PAUSE_MS))
        : undefined,
    });
    // A default no provider can serve would fail every turn that names no model: refuse to start.
    const served = runtime.models.resolve(runtimeConfig.default_model);
    if (!served.ok) {
      throw new MetisError(
        'METIS_ERR_INVALID_MODEL',
        `default model "${runtimeConfig.default_model}" cannot serve turns (${served.failure}): ` +
          'its provider is not configured (an unknown provider, or no API key)',
      );
    }
    const pluginHost = plugins;
    const traceContext = trace;
    const sessionGate: SessionGate = async (sessionId, creating = false) => {
      if (!clustered) return;
      if (cluster === null)
        throw new MetisError(
          'METIS_ERR_STORE_UNAVAILABLE',
          'this node is still joining its cluster; try again in a moment',
        );
      // A turn running here was let in by the gate: this node owns the session (a cancel or an answer to
      // a confirmation needs no store, which may be away).
      if (runtime.currentTurn(sessionId) !== null) return;
      // Unknown here and not being made (a route naming its session in the body makes it): the route
      // answers 404, and no lease is taken for an id nobody made.
      if (!creating && !runtime.hasSession(sessionId)) {
        // Made on another node a moment ago, and not mirrored here yet?
        await cluster.refresh(sessionId);
        if (!runtime.hasSession(sessionId)) return;
      }
      await cluster.ownSession(rootOf(sessionId));
    };
    /** A cancel frame on a stream of this node for a session another node runs goes there. */
    const runElsewhere: ConnectionDeps['runElsewhere'] = async (sessionId, request) => {
      if (runsHere(sessionId)) return null;
      try {
        await sessionGate(sessionId);
        return null;
      } catch (refusal) {
        const answer =
          cluster === null ? null : await cluster.forwardRefused(refusal, { ...request, headers: {} });
        if (answer === null) throw refusal;
        return answer;
      }
    };
    const server = await startServer(runtime, trace, {
      host: config.server.host,
      port: config.server.port,
      bearerToken: auth.token,
      allowedOrigins: config.server.allowed_origins,
      trustedProxies: config.server.trusted_proxies,
      staticRoot: dashboard ?? undefined,
      attachTokenTtlMs: config.server.attach_token_ttl_ms,
      stream: {
        maxQueueEvents,
        maxQueueBytes: config.server.max_queue_bytes,
        replayCap: config.server.replay_cap,
        heartbeatIntervalMs,
        retentionDays: config.storage.retention_days,
      },
      faults: faults as FaultSwitches,
      logger,
      metrics: { plugins: () => plugins?.list() ?? [], processMetrics: true },
      sessionGate,
      sessionRead: async (sessionId) => {
        if (cluster !== null) await cluster.refresh(sessionId);
      },
      runElsewhere: clustered ? runElsewhere : undefined,
      forwardRefused: async (refusal, request) =>
        cluster === null ? null : cluster.forwardRefused(refusal, request),
      health: () => ({
        ...(traceContext.upstream === null ? {} : { store: storeHealth(traceContext.upstream) }),
        ...(cluster === null ? {} : cluster.health()),
      }),
      extraRoutes: ({ hub }) => [
        pluginsRoute(pluginHost),
        ...(conformance
          ? conformanceRoutes(
              traceContext,
              {
                heartbeatIntervalMs,
                maxQueueEvents,
                replayCap: config.server.replay_cap,
                faults: conformance.faults,
              },
              hub,
            )
          : []),
      ],
    });
    listening = server;
    let lastLag = { backlog: 0, shippedAtUs: null as number | null };
    if (prepared !== null) {
      const upstream = traceContext.upstream;
      if (upstream === null) throw new Error('a cluster node runs on a PostgreSQL store');
      cluster = await prepared.join({
        url: server.url,
        trace: traceContext,
        upstream,
        streaming: runtime.streaming,
        sequencer: server.hub.sequencer,
        token: auth.token,
        runInProcess: server.inject,
        runsHere,
        forget: (sessionIds) => {
          for (const sessionId of sessionIds) runtime.release(sessionId);
        },
        followed: () => server.hub.attachedSessionIds(),
        onBrokerLost: () => {
          const closed = server.hub.closeStreams(
            (sessionId) => !runsHere(sessionId),
            'broker_unavailable',
            'this node lost its NATS broker and no longer receives the live events of this session, which another node runs; reconnect with your cursor (to another node, or to this one once it is back)',
          );
          if (closed > 0)
            logger.warn(
              { streams: closed },
              'closed the streams of sessions other nodes run: the broker is away',
            );
        },
        adoptable: (sessionId) => sessionRecords.turnState(sessionId).currentTurnId !== null,
        rowIdBlock: (block) => useRowIdBlock(traceContext.db, block),
        takeOver: async (sessionId, read) => {
          const report = await takeOverSession(
            { read, trace: traceContext, runtime, pricingVersion: config.runtime.pricing_version, logger },
            sessionId,
          );
          // Its events are this node's to release from now on, in this node's order.
          server.hub.sequencer.forgetRemote(selfAndDescendants(sessionRecords, sessionId));
          return report;
        },
        lag: () => {
          // Read from the working copy; after a forced stop closed it, the last figure read stands.
          try {
            lastLag = {
              backlog: traceContext.upstream?.backlog ?? 0,
              shippedAtUs: traceContext.upstream?.shippedAtUs ?? null,
            };
          } catch {}
          return lastLag;
        },
      });
      prepared = null; // joined: closing the node closes the broker
      const node = cluster;
      upstream.onFenced(({ sessionIds }) => {
        const roots = [...new Set(sessionIds.map(rootOf))];
        node.lost(roots);
        // What this node still runs there reaches no one: the turn is cancelled, its tools' processes
        // with it (their events are fenced off too).
        for (const root of roots) {
          const turn = runtime.currentTurn(root);
          if (turn === null) continue;
          runtime.cancelTurn(root, turn.turnId, 'timeout');
          // Then forgotten: the session's next use here reads the store again.
          void turn.done.finally(() => runtime.release(root));
        }
      });
    }
    const joined = cluster;
    const opened = trace;
    const host = plugins;
    let stopping: Promise<void> | null = null;
    const abandon = () => {
      try {
        // A writer still waiting out an outage would retry against the closed connection for ever.
        opened.writer.close();
        if (opened.db.open) opened.db.close();
      } catch (error) {
        logger.error({ err: (error as Error).message }, 'closing the database at a forced stop failed');
      } finally {
        release();
        void joined?.close();
        void store?.close();
      }
    };
    return {
      url: server.url,
      dashboardUrl: dashboard === null ? null : server.signInLink(),
      dbPath: tracePath,
      store: store?.copy.label ?? null,
      gaps,
      recovery,
      runtime,
      trace: opened,
      server,
      plugins: host,
      cluster: joined,
      auth,
      abandon,
      stop: () => {
        stopping ??= (async () => {
          const deadline = Date.now() + config.server.shutdown_timeout_ms;
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
            // Cancel in-flight turns while clients are still attached, so they see the cancellation.
            server.stopAccepting();
            await step('cancelling turns', () => runtime.close());
            // Plugins before the trace flush: a plugin's stuck handler cannot hold the flush, which waits
            // for every mailbox (issue 12, observation 5).
            await step('stopping plugins', () => host.stop({ deadline: deadline - CLOSE_RESERVE_MS }));
            await step('flushing the trace', () => opened.flush());
            await step('closing client connections', () => server.close());
            await step('closing the database', () => opened.close(), 0);
            // After the last change is shipped: a node that takes this one's sessions over finds them whole.
            if (joined !== null) await step('leaving the cluster', () => joined.close(), 0);
          } finally {
            abandon();
          }
        })();
        return stopping;
      },
    };
  } catch (error) {
    // A start that failed after the server listened (joining the cluster) must not leave it answering.
    await listening?.close().catch(() => {});
    await plugins?.stop();
    await cluster?.close();
    await prepared?.abort();
    await trace?.close();
    release();
    await store?.close();
    throw error;
  }
}

/**
 * What `/healthz` says of a PostgreSQL store: whether it takes writes now. Not its URL nor the reason
 * (a host name, an address): `/healthz` needs no token; the log has the reason.
 */
function storeHealth(upstream: StoreUpstream): { state: 'ok' | 'unavailable' } {
  return { state: upstream.failure === null ? 'ok' : 'unavailable' };
}

/** The dashboard's folder: the built one by default, a folder of the user's, or none. */
function dashboardFolder(setting: boolean | string): string | null {
  if (setting === false) return null;
  if (typeof setting === 'string') {
    if (!existsSync(join(setting, 'index.html')))
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `server.dashboard: ${setting} has no index.html (a dashboard build folder, or true, or false)`,
      );
    return setting;
  }
  // dist/dashboard beside this file's package (src/ and dist/ alike are two levels below the root).
  const built = fileURLToPath(new URL('../../../dist/dashboard', import.meta.url));
  return existsSync(join(built, 'index.html')) ? built : null;
}
