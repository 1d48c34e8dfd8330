import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { type WebSocket, WebSocketServer } from 'ws';
import { MetisError } from '../errors.js';
import { silentLogger } from '../logger.js';
import type { Runtime } from '../runtime/runtime.js';
import { LOOP_BUSY_TIMEOUT_MS } from '../store/database.js';
import type { TraceContext } from '../store/trace-context.js';
import { packageVersion } from '../version.js';
import { agUiRoutes } from './ag-ui-route.js';
import { AttachTokens } from './attach-tokens.js';
import { AuthGate, type GateVerdict } from './auth-gate.js';
import type { AuthThrottleOptions } from './auth-throttle.js';
import { chatRoutes } from './chat-route.js';
import { trustedProxies } from './client-address.js';
import { ClientConnection, type ConnectionDeps, type StreamOptions } from './client-connection.js';
import { allowOrigin, answerPreflight } from './cors.js';
import { dashboardAuthRoutes } from './dashboard-auth-routes.js';
import { EventSequencer } from './event-sequencer.js';
import type { FaultSwitches } from './faults.js';
import { apiRoutes } from './http-api.js';
import { createHttpApp, type ForwardRefused, type HttpApp, type SessionGate } from './http-app.js';
import { inspectRoutes } from './inspect-routes.js';
import { type PluginMetricsSource, ServerMetrics } from './metrics.js';
import { type Route, rawRoute } from './routes.js';
import { checkRequest, isListedOrigin, isLoopbackBind, type SecurityOptions } from './security.js';
import { createSseRoute } from './sse-route.js';
import { staticRoutes } from './static-files.js';
import { DEFAULT_STREAM_WINDOW, StreamArchive, type StreamWindow } from './stream-archive.js';
import { StreamHub } from './stream-hub.js';
import { WebSocketTransport } from './stream-transport.js';

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
    readonly trace: TraceContext;
  }) => readonly Route[];
  /** In a cluster: resolves once this node owns the session (before any request that changes it). */
  readonly sessionGate?: SessionGate;
  /** In a cluster: brings a session up to date before a GET reads it (http-app.ts). */
  readonly sessionRead?: (sessionId: string) => Promise<void>;
  /** In a cluster: runs a request the gate refused on the node that owns its session. */
  readonly forwardRefused?: ForwardRefused;
  /** In a cluster: runs a stream's request (a cancel frame) where its session runs (client-connection.ts). */
  readonly runElsewhere?: ConnectionDeps['runElsewhere'];
  /** What `GET /healthz` adds to `{status}`: the store's and the cluster's state (serve.ts). */
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

const MAX_PAYLOAD = 1024 * 1024;
const STREAM_PATH = /^\/sessions\/([^/]+)\/stream$/;

/**
 * The streaming server: the HTTP API and one WebSocket per client per session (streaming spec §3),
 * on top of a runtime and its trace store.
 */
export async function startServer(
  runtime: Runtime,
  trace: TraceContext,
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
  // From here the connection serves the loop: no write may wait long for another process's lock.
  trace.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
  const streamOptions: StreamOptions = { ...DEFAULT_STREAM_OPTIONS, ...options.stream };
  const sequencer = new EventSequencer(trace.bus, trace.writer, runtime.streaming);
  const archive = options.faults?.shortStreamWindow
    ? null
    : new StreamArchive(trace.db, { ...DEFAULT_STREAM_WINDOW, ...options.streamWindow });
  const hub = new StreamHub(sequencer, runtime.sessions, archive);
  const tokens = new AttachTokens(options.attachTokenTtlMs);
  const connections = new Set<ClientConnection>();
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
  const connectionDeps = () => ({
    hub,
    store: trace.store,
    runtime,
    bus: trace.bus,
    options: streamOptions,
    logger,
    faults: options.faults,
    counters: metrics,
    runElsewhere: options.runElsewhere,
  });
  const otherRoutes: Route[] = [
    createSseRoute(runtime, connectionDeps, (connection, response) => {
      connections.add(connection);
      response.on('close', () => connections.delete(connection));
    }),
    ...chatRoutes(runtime, connectionDeps, trace, options.sessionGate),
    ...agUiRoutes(runtime, connectionDeps, trace, options.sessionGate),
    rawRoute(
      {
        method: 'GET',
        path: '/metrics',
        head: true,
        summary: 'Prometheus metrics',
        success: { status: 200, description: 'Prometheus text format', contentType: 'text/plain' },
        errors: [],
      },
      ({ request }, response) => metrics.respond(request, response),
    ),
    ...inspectRoutes(runtime, trace, streamOptions.retentionDays),
    ...dashboardAuthRoutes(gate, signInLink),
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
      sessionGate: options.sessionGate,
    }),
    ...otherRoutes,
  ];
  const { server, served, inject } = await createHttpApp({
    routes,
    logger,
    dbPath: trace.dbPath,
    sessionGate: options.sessionGate,
    sessionRead: options.sessionRead,
    forwardRefused: options.forwardRefused,
    frontDoor: (request, response) => {
      const verdict = checkRequest(request, security);
      const listed = request.headers.origin !== undefined && isListedOrigin(request.headers.origin, security);
      if (verdict.ok && answerPreflight(request, response, listed)) return false;
      if (verdict.ok) allowOrigin(request, response, listed);
      const auth: GateVerdict = !verdict.ok ? verdict : gate.check(request);
      if (!auth.ok) {
        response.writeHead(auth.status, {
          'content-type': 'application/json',
          ...('retryAfterSeconds' in auth ? { 'retry-after': String(auth.retryAfterSeconds) } : {}),
        });
        response.end(JSON.stringify({ error: { code: auth.code, message: auth.message } }));
        return false;
      }
      return true;
    },
  });
  // No permessage-deflate: connections write pre-encoded frames straight to the socket (wire-frame.ts),
  // which is only safe while the `ws` sender never holds a frame back to compress it.
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PAYLOAD, perMessageDeflate: false });

  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const refuse = (status: number, message: string, extra = '') => {
      socket.end(`HTTP/1.1 ${status} ${message}\r\n${extra}Connection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    const verdict = checkRequest(request, security);
    if (!verdict.ok) return refuse(verdict.status, 'Forbidden');
    let url: URL;
    try {
      url = new URL(request.url ?? '/', 'http://localhost');
    } catch {
      return refuse(400, 'Bad Request');
    }
    const match = STREAM_PATH.exec(url.pathname);
    if (!match) return refuse(404, 'Not Found');
    let sessionId: string;
    try {
      sessionId = decodeURIComponent(match[1]!);
    } catch {
      return refuse(400, 'Bad Request');
    }
    const attached = tokens.consume(url.searchParams.get('attach'), sessionId);
    const auth = gate.checkUpgrade(request, attached);
    if (!auth.ok) {
      const retry = 'retryAfterSeconds' in auth ? `Retry-After: ${auth.retryAfterSeconds}\r\n` : '';
      return refuse(auth.status, auth.status === 429 ? 'Too Many Requests' : 'Unauthorized', retry);
    }
    // Authenticated by header, but the stream still needs its attach token (streaming §3.1).
    if (!attached) return refuse(401, 'Unauthorized');
    wss.handleUpgrade(request, socket, head, (ws) => {
      const connection = new ClientConnection(
        new WebSocketTransport(ws, socket),
        sessionId,
        connectionDeps(),
      );
      connections.add(connection);
      ws.on('close', () => connections.delete(connection));
    });
  });

  const port = options.port ?? 8421;
  await new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => {
      metrics.close();
      reject(listenError(error, host, port));
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
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
        await closeHandshakes(wss.clients, CLOSE_GRACE_MS);
        for (const client of wss.clients) client.terminate();
        server.closeAllConnections();
        wss.close();
        await serverStopped;
        hub.close();
        sequencer.close();
        metrics.close();
      })();
      return closing;
    },
  };
}

/** Resolves when every socket has closed (its close handshake done) or after `graceMs`. */
function closeHandshakes(clients: ReadonlySet<WebSocket>, graceMs: number): Promise<void> {
  const open = [...clients].filter((client) => client.readyState !== client.CLOSED);
  if (open.length === 0) return Promise.resolve();
  return new Promise<void>((resolve) => {
    let left = open.length;
    const timer = setTimeout(resolve, graceMs);
    for (const client of open) {
      client.once('close', () => {
        left -= 1;
        if (left === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
    }
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
