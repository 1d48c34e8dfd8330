import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MetisServer, type ServerOptions, startServer } from '../../src/core/app/metis-server.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import { openTraceContext, type TraceContext } from '../../src/core/store/trace-context.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

/**
 * One real server on port 0 over a real SQLite file, shared by the tests of a file (issue 30's search,
 * trace content and usage tests): made in `beforeAll`, closed by `close` in `afterAll`.
 */
export interface Rig {
  readonly runtime: Runtime;
  readonly context: TraceContext;
  readonly server: MetisServer;
  readonly url: string;
  readonly dbPath: string;
  request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  createSession(body?: Record<string, unknown>): Promise<string>;
  /** Submits a message and waits until its turn ended and every event is stored; the turn id. */
  runTurn(sessionId: string, message: string): Promise<string>;
  close(): Promise<void>;
}

export async function startRig(config: RuntimeConfigInput = {}, options: ServerOptions = {}): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'metis-trace-api-'));
  const dbPath = join(dir, 'metis.db');
  const context = openTraceContext({ validation: 'strict', dbPath, create: true });
  const workspace = mkdtempSync(join(tmpdir(), 'metis-ws-'));
  const runtime = createRuntime({ bus: context.bus, store: context.port, config: testRuntimeConfig(config) });
  const server = await startServer(runtime, context, { port: 0, ...options });
  const request: Rig['request'] = async (method, path, body) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: body === undefined && method === 'GET' ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
  return {
    runtime,
    context,
    server,
    url: server.url,
    dbPath,
    request,
    createSession: async (body = {}) => {
      const created = await request('POST', '/sessions', { workspace_path: workspace, ...body });
      if (created.status !== 201) throw new Error(`create failed: ${JSON.stringify(created.body)}`);
      return created.body.session_id as string;
    },
    runTurn: async (sessionId, message) => {
      const response = await request('POST', `/sessions/${sessionId}/turns`, { message });
      if (response.status !== 202) throw new Error(`submit failed: ${JSON.stringify(response.body)}`);
      await runtime.currentTurn(sessionId)?.done;
      await context.flush();
      return response.body.turn_id as string;
    },
    close: async () => {
      await server.close();
      await runtime.close();
      await context.close();
      rmSync(dir, { recursive: true, force: true });
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}
