import { onTestFinished } from 'vitest';
import WebSocket from 'ws';
import { type MetisServer, type ServerOptions, startServer } from '../../src/core/app/metis-server.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import type { SessionReads } from '../../src/core/store/session-reads.js';
import { SqliteStreamArchiveRows, type StreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import { type StreamReads, sqliteStreamReads } from '../../src/core/store/stream-reads.js';
import type { OpenTraceContextOptions, TraceContext } from '../../src/core/store/trace-context.js';
import { testRuntimeConfig } from './runtime-config.js';
import { tempDir, tempTraceContext } from './tmp.js';

export interface TestServer {
  readonly runtime: Runtime;
  readonly context: TraceContext;
  readonly server: MetisServer;
  readonly url: string;
  readonly workspace: string;
  /** JSON request against the server; returns status and parsed body. */
  request(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: any }>;
  createSession(): Promise<string>;
  submit(sessionId: string, message: string): Promise<string>;
  /** Handshake + WebSocket; `options` go to the `ws` client (e.g. `autoPong: false`). */
  attach(sessionId: string, options?: WebSocket.ClientOptions): Promise<TestClient>;
}

/** A real server on port 0 over a real SQLite file, with the scripted model at full speed. */
export async function startTestServer(
  config: RuntimeConfigInput = {},
  options: ServerOptions & {
    beforeToolExecute?: () => Promise<void>;
    /** Stands between subscriptions and the SQLite store's reads (slow-reads.ts: a store far away). */
    wrapStreamReads?: (reads: StreamReads) => StreamReads;
    /** Stands between the runtime's existence check and the store (slow-reads.ts: a store far away). */
    wrapSessionReads?: (reads: SessionReads) => SessionReads;
    /** Stands between the stream archive and its SQLite rows (slow-reads.ts: a store far away). */
    wrapArchiveRows?: (rows: StreamArchiveRows) => StreamArchiveRows;
    /** How the trace context is opened (its file, a store upstream). */
    trace?: Partial<OpenTraceContextOptions>;
  } = {},
): Promise<TestServer> {
  const context = tempTraceContext(options.trace);
  const workspace = tempDir('metis-ws-');
  const runtime = createRuntime({
    bus: context.bus,
    store:
      options.wrapSessionReads === undefined
        ? context.port
        : { ...context.port, sessionReads: options.wrapSessionReads(context.port.sessionReads) },
    config: testRuntimeConfig(config),
    beforeToolExecute: options.beforeToolExecute,
  });
  const {
    wrapStreamReads,
    wrapSessionReads: _sessionReads,
    wrapArchiveRows,
    trace: _trace,
    ...serverOptions
  } = options;
  const streamReads = wrapStreamReads?.(sqliteStreamReads(context.store, context.port.sessions));
  const streamArchiveRows = wrapArchiveRows?.(new SqliteStreamArchiveRows(context.db));
  const server = await startServer(runtime, context, {
    port: 0,
    streamReads,
    streamArchiveRows,
    ...serverOptions,
  });
  onTestFinished(async () => {
    await server.close();
    await runtime.close();
  });
  return { context, ...testServerOn(runtime, server, workspace) };
}

/** A test's handle on a server already started (on any store), with its runtime and workspace. */
export function testServerOn(
  runtime: Runtime,
  server: MetisServer,
  workspace: string,
): Omit<TestServer, 'context'> {
  const request: TestServer['request'] = async (method, path, body, headers = {}) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      // Anything but a read is JSON, even with no body, as metis's own clients send it.
      headers:
        body === undefined && method === 'GET' ? headers : { 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
  return {
    runtime,
    server,
    url: server.url,
    workspace,
    request,
    createSession: async () =>
      (await request('POST', '/sessions', { workspace_path: workspace })).body.session_id,
    submit: async (sessionId, message) => {
      const response = await request('POST', `/sessions/${sessionId}/turns`, { message });
      if (response.status !== 202) throw new Error(`submit failed: ${JSON.stringify(response.body)}`);
      return response.body.turn_id;
    },
    attach: async (sessionId, wsOptions) => {
      const handshake = await request('GET', `/sessions/${sessionId}`);
      if (handshake.status !== 200) throw new Error(`attach failed: ${JSON.stringify(handshake.body)}`);
      return openClient(handshake.body.ws_url, wsOptions);
    },
  };
}

export interface TestClient {
  readonly ws: WebSocket;
  readonly frames: any[];
  /** Event frames' events only. */
  events(): any[];
  send(frame: unknown): void;
  /** Resolves with the first frame (from now or already received) that matches. */
  waitFor(predicate: (frame: any) => boolean, timeoutMs?: number): Promise<any>;
  closed: Promise<{ code: number; reason: string }>;
  close(): void;
}

export function openClient(url: string, options: WebSocket.ClientOptions = {}): Promise<TestClient> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, options);
    const frames: any[] = [];
    const waiters: { predicate: (f: any) => boolean; resolve: (f: any) => void }[] = [];
    let closedResolve!: (v: { code: number; reason: string }) => void;
    const closed = new Promise<{ code: number; reason: string }>((r) => {
      closedResolve = r;
    });
    ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      frames.push(frame);
      for (const waiter of [...waiters]) {
        if (waiter.predicate(frame)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(frame);
        }
      }
    });
    ws.on('close', (code, reason) => closedResolve({ code, reason: String(reason) }));
    ws.on('error', reject);
    ws.on('open', () => {
      const client: TestClient = {
        ws,
        frames,
        events: () => frames.filter((f) => f.type === 'event').map((f) => f.event),
        send: (frame) => ws.send(JSON.stringify(frame)),
        waitFor: (predicate, timeoutMs = 10_000) => {
          const found = frames.find(predicate);
          if (found) return Promise.resolve(found);
          return new Promise((res, rej) => {
            const timer = setTimeout(() => rej(new Error('timed out waiting for a frame')), timeoutMs);
            waiters.push({
              predicate,
              resolve: (f) => {
                clearTimeout(timer);
                res(f);
              },
            });
          });
        },
        closed,
        close: () => ws.close(),
      };
      onTestFinished(() => ws.terminate());
      resolve(client);
    });
  });
}

/** Opens a WebSocket and reports the upgrade's HTTP status (101 when it opened). */
export function upgradeStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_request, response) => {
      resolve(response.statusCode ?? 0);
      ws.terminate();
    });
    ws.once('error', () => resolve(0));
  });
}
