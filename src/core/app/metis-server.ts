import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { dashboardAuthRoutes } from '../api/dashboard-auth-routes.js';
import { apiRoutes } from '../api/http-api.js';
import { inspectRoutes } from '../api/inspect-routes.js';
import { memoryRoutes } from '../api/memory-routes.js';
import { metricsRoute, ServerMetrics } from '../api/metrics.js';
import type { PluginMetricsSource } from '../api/metrics-series.js';
import { queueRoutes } from '../api/queue-routes.js';
import { skillRoutes } from '../api/skill-routes.js';
import { MetisError } from '../errors.js';
import { type GatewayOptions, gatewayRoutes } from '../gateway/gateway-routes.js';
import { AttachTokens } from '../http/attach-tokens.js';
import { AuthGate } from '../http/auth-gate.js';
import type { AuthThrottleOptions } from '../http/auth-throttle.js';
import { trustedProxies } from '../http/client-address.js';
import { frontDoor } from '../http/front-door.js';
import { createHttpApp, type HttpApp } from '../http/http-app.js';
import type { Route } from '../http/routes.js';
import { isLoopbackBind, type SecurityOptions } from '../http/security.js';
import type { SessionRouter } from '../http/session-router.js';
import { staticRoutes } from '../http/static-files.js';
import { silentLogger } from '../logger.js';
import type { Runtime } from '../runtime/runtime.js';
import { shippedCommits } from '../store/shipped-commits.js';
import type { StoreContext } from '../store/store-context.js';
import type { StreamArchiveRows } from '../store/stream-archive-rows.js';
import type { StreamReads } from '../store/stream-reads.js';
import type { WholeStoreReads } from '../store/whole-store-reads.js';
import type { StreamOptions } from '../stream/client-connection.js';
import type { OpenConnection } from '../stream/connection-deps.js';
import { EventSequencer } from '../stream/event-sequencer.js';
import type { FaultSwitches } from '../stream/faults.js';
import { DEFAULT_STREAM_WINDOW, StreamArchive, type StreamWindow } from '../stream/stream-archive.js';
import { StreamHub } from '../stream/stream-hub.js';
import { agUiRoutes } from '../stream/transports/ag-ui/ag-ui-route.js';
import { chatRoutes } from '../stream/transports/ai-sdk/chat-route.js';
import { createSseRoute } from '../stream/transports/sse/sse-route.js';
import { openWebSocketDoor } from '../stream/transports/websocket/websocket-door.js';
import { packageVersion } from '../version.js';

export interface ServerOptions {
  readonly host?: string;
  /** 0 picks a free port (tests). */
  readonly port?: number;
  /** Required on every request but `GET /healthz` when set (always set for a non-loopback bind). */
  readonly bearerToken?: string | null;
  /** The slow-down of peers that keep sending wrong tokens (defaults in auth-throttle.ts). */
  readonly authThrottle?: Partial<AuthThrottleOptions>;
  readonly allowedOrigins?: readonly string[];
  /** `server.trusted_proxies`: proxies whose `X-Forwarded-For` names the client (client-address.ts). */
  readonly trustedProxies?: readonly string[];
  /** A folder of static files served at `/` and `/assets/…` (the dashboard's build; static-files.ts). */
  readonly staticRoot?: string;
  readonly stream?: Partial<StreamOptions>;
  /** How much of each session's streaming events a reconnect can replay (stream-archive.ts). */
  readonly streamWindow?: Partial<StreamWindow>;
  readonly attachTokenTtlMs?: number;
  readonly faults?: FaultSwitches;
  readonly logger?: Logger;
  /** Routes beside the API's own (`GET /plugins`, the `--conformance` hooks), given the server's parts. */
  readonly extraRoutes?: (parts: {
    readonly hub: StreamHub;
    readonly trace: StoreContext;
  }) => readonly Route[];
  /** In a cluster: where a request naming a session runs (gate, read, forward); all here without one. */
  readonly sessionRouter?: SessionRouter;
  /** Where `GET /sessions`, `GET /stats/usage` and `GET /store/stats` read; the store's own when absent. */
  readonly wholeStore?: WholeStoreReads;
  /** What `GET /healthz` adds to `{status}`: the store's and the cluster's state (start-service.ts). */
  readonly health?: () => Record<string, unknown>;
  /** What `GET /metrics` reports beyond the server's own figures. */
  readonly metrics?: {
    /** The running plugins' error and timeout counts (`GET /plugins`). */
    readonly plugins?: () => readonly PluginMetricsSource[];
    /** Node's process metrics; `metis serve` turns them on (prom-client cannot turn them off again). */
    readonly processMetrics?: boolean;
  };
  /**
   * How long `POST /sessions` and `POST .../turns` wait for their first event to be committed before
   * answering 503/507 (default 5 s). The wait is async; the loop keeps serving.
   */
  readonly commitWaitMs?: number;
  /** The OpenAI- and Anthropic-compatible gateway under `/v1` (docs/gateway.md); none without. */
  readonly gateway?: GatewayOptions;
  /** `server.dashboard_content`: the trace's content in full (default) or redacted (inspect-routes.ts). */
  readonly dashboardContent?: 'full' | 'redacted';
  /**
   * What subscriptions read of the store (snapshot, replay, cursor checks); by default the store's own
   * (`StoreContext.reads`).
   */
  readonly streamReads?: StreamReads;
  /** Where the stream archive keeps its rows; by default the store's own. */
  readonly streamArchiveRows?: StreamArchiveRows;
}

export interface MetisServer {
  readonly url: string;
  readonly port: number;
  readonly hub: StreamHub;
  readonly metrics: ServerMetrics;
  /**
   * A sign-in link to the dashboard: `/` with a single-use `?login=` code that the page trades for its
   * access key (dashboard-auth-routes.ts); plain `/` when the server has no token.
   */
  signInLink(): string;
  /** Runs a request through the routes in process, past the front door (http-app.ts). */
  readonly inject: HttpApp['inject'];
  /** Every method and path template the HTTP layer serves (`GET /openapi.json` must name each). */
  readonly served: readonly { readonly method: string; readonly path: string }[];
  /**
   * Stops accepting connections; attached clients keep receiving until `close`. Lets a shutdown
   * cancel in-flight turns while their clients still see the cancellation. Safe to call twice.
   */
  stopAccepting(): void;
  /** Stops accepting, closes every client with 1001, and stops the server. Safe to call twice. */
  close(): Promise<void>;
}

/** How long a shutdown waits for clients to answer the close frame before dropping their sockets. */
const CLOSE_GRACE_MS = 1_000;

export const DEFAULT_STREAM_OPTIONS: StreamOptions = {
  maxQueueEvents: 1000,
  maxQueueBytes: 8 * 1024 * 1024,
  replayCap: 10_000,
  heartbeatIntervalMs: 30_000,
  retentionDays: 90,
  socketHighWaterMark: 256 * 1024,
};

/**
 * The streaming server: the HTTP API and one WebSocket per client per session (streaming spec §3),
 * on top of a runtime and its trace store.
 */
export async function startServer(
  runtime: Runtime,
  trace: StoreContext,
  options: ServerOptions = {},
): Promise<MetisServer> {
  const logger = options.logger ?? silentLogger();
  const host = options.host ?? '127.0.0.1';
  const loopbackOnly = isLoopbackBind(host);
  const bearerToken = options.bearerToken ?? null;
  if (!loopbackOnly && bearerToken === null) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `binding ${host} needs a bearer token`, {
      hint: 'Set server.bearer_token in config (or METIS_TOKEN, 16 characters at least) before binding a non-loopback address.',
    });
  }
  const security: SecurityOptions = { allowedOrigins: options.allowedOrigins ?? [], loopbackOnly };
  const gate = new AuthGate(bearerToken, logger, {
    throttle: options.authThrottle,
    trustedProxies: trustedProxies(options.trustedProxies ?? []),
  });
  trace.serving();
  const streamOptions: StreamOptions = { ...DEFAULT_STREAM_OPTIONS, ...options.stream };
  // On PostgreSQL a bus event reaches clients once the store of record holds it (issue 35, cause 4).
  const commits = trace.upstream === null ? trace.writer : shippedCommits(trace.writer, trace.upstream);
  const sequencer = new EventSequencer(trace.bus, commits, runtime.streaming);
  const archive = options.faults?.shortStreamWindow
    ? null
    : new StreamArchive(options.streamArchiveRows ?? trace.reads.archiveRows(), {
        ...DEFAULT_STREAM_WINDOW,
        ...options.streamWindow,
      });
  const hub = new StreamHub(sequencer, runtime.sessions, archive);
  const tokens = new AttachTokens(options.attachTokenTtlMs);
  const connections = new Set<OpenConnection>();
  const metrics = new ServerMetrics({
    bus: trace.bus,
    writer: trace.writer,
    streaming: runtime.streaming,
    connections: () => connections,
    plugins: options.metrics?.plugins,
    processMetrics: options.metrics?.processMetrics,
  });
  let address = '';
  const signInLink = () => {
    const code = gate.issueLoginCode();
    return `http://${address}/${code === null ? '' : `?login=${encodeURIComponent(code)}`}`;
  };
  const streamReads = options.streamReads ?? trace.reads.stream(runtime.sessions);
  const connectionDeps = () => ({
    hub,
    lookups: trace.port.lookups,
    reads: streamReads,
    runtime,
    bus: trace.bus,
    options: streamOptions,
    logger,
    faults: options.faults,
    counters: metrics,
    runElsewhere: options.sessionRouter?.runElsewhere,
    opened: (connection: OpenConnection) => {
      connections.add(connection);
      const unwatch = options.sessionRouter?.watch?.(connection.sessionId);
      return () => {
        connections.delete(connection);
        unwatch?.();
      };
    },
  });
  const wholeStore = options.wholeStore ?? trace.reads.wholeStore;
  const gateway =
    options.gateway === undefined
      ? null
      : gatewayRoutes(
          runtime,
          { bus: trace.bus, spendSince: trace.reads.gatewaySpendSince },
          options.gateway,
          logger,
        );
  const otherRoutes: Route[] = [
    createSseRoute(runtime, connectionDeps),
    ...chatRoutes(runtime, connectionDeps, trace, options.sessionRouter?.gate),
    ...agUiRoutes(runtime, connectionDeps, trace, options.sessionRouter?.gate),
    metricsRoute(metrics),
    ...inspectRoutes(runtime, streamOptions.retentionDays, {
      dashboardContent: options.dashboardContent,
      wholeStore,
      traceReads: trace.reads.traceContent,
      lineage: streamReads.lineage,
    }),
    ...memoryRoutes(trace.bus, runtime.config.memory.max_bytes),
    ...skillRoutes(trace.bus, runtime.config.skills.global_dir),
    ...queueRoutes(runtime),
    ...dashboardAuthRoutes(gate, signInLink),
    ...(gateway?.routes ?? []),
    ...(options.staticRoot === undefined ? [] : staticRoutes(options.staticRoot)),
    ...(options.extraRoutes?.({ hub, trace }) ?? []),
  ];
  const routes: Route[] = [
    ...apiRoutes({
      runtime,
      trace,
      commitWaitMs: options.commitWaitMs,
      tokens,
      faults: options.faults,
      // The host the client named (checked by the front door): behind a proxy or a load balancer the
      // node's own address is not one the client can reach. A proxy that ends TLS says so.
      wsBase: (request) => {
        const secure = request.headers['x-forwarded-proto'] === 'https';
        return `${secure ? 'wss' : 'ws'}://${request.headers.host ?? address}`;
      },
      version: packageVersion(),
      otherRoutes: () => otherRoutes,
      health: options.health,
      sessionGate: options.sessionRouter?.gate,
      sessionList: wholeStore.sessions,
    }),
    ...otherRoutes,
  ];
  const { server, served, inject } = await createHttpApp({
    routes,
    logger,
    storageErrorOf: (error) => trace.storageErrorOf(error),
    sessionRouter: options.sessionRouter,
    frontDoor: frontDoor(security, gate),
  });
  const webSockets = openWebSocketDoor(server, { security, gate, tokens, connectionDeps });

  const port = options.port ?? 8421;
  await listen(server, host, port).catch((error) => {
    metrics.close();
    throw error;
  });
  const bound = server.address() as AddressInfo;
  address = `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`;

  let stopped: Promise<void> | null = null;
  const stopAccepting = () => {
    stopped ??= new Promise<void>((resolve) => server.close(() => resolve()));
    return stopped;
  };
  let closing: Promise<void> | null = null;
  return {
    url: `http://${address}`,
    port: bound.port,
    hub,
    metrics,
    served,
    signInLink,
    inject,
    stopAccepting: () => void stopAccepting(),
    close: () => {
      closing ??= (async () => {
        const serverStopped = stopAccepting();
        for (const connection of connections) connection.shutdown();
        await webSockets.close(CLOSE_GRACE_MS);
        server.closeAllConnections();
        await serverStopped;
        hub.close();
        sequencer.close();
        metrics.close();
        await gateway?.close();
      })();
      return closing;
    },
  };
}

/** Listens on `host:port`; a failure the CLI can name (a port in use, say) becomes a MetisError. */
function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => reject(listenError(error, host, port));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

/** A listen failure as the CLI should report it: which address, and why. */
function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const why: Record<string, string> = {
    EADDRINUSE: 'the port is already in use (another metis serve?)',
    EACCES: 'permission denied (ports below 1024 need privileges)',
    EADDRNOTAVAIL: 'this machine has no such address',
  };
  const reason = error.code === undefined ? undefined : why[error.code];
  if (reason === undefined) return error;
  return new MetisError('METIS_ERR_LISTEN', `cannot listen on ${address}: ${reason}`, { cause: error });
}
