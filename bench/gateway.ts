/**
 * The gateway suite: what metis's gateway (key check, quota, routing, a session and a turn recorded,
 * the model adapter, the answer re-encoded as the client's provider shape) adds to the time to the
 * first token of a streamed chat completion, against calling the same fake upstream provider directly,
 * in the same run with the same keep-alive client. The fake upstream replays a recorded OpenAI stream
 * (test/fixtures/provider-streams/openai-text.sse) with no delay, so the difference is metis's.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { startServer } from '../src/core/app/metis-server.js';
import { GatewayConfigSchema } from '../src/core/config/gateway-schema.js';
import { issueKey } from '../src/core/gateway/key-admin.js';
import { silentLogger } from '../src/core/logger.js';
import { createRuntime } from '../src/core/runtime/runtime.js';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

const RECORDING = join(import.meta.dirname, '../test/fixtures/provider-streams/openai-text.sse');
/** The first token of the recording: the clock stops when it arrives. */
const FIRST_TOKEN = '"content":"Hello"';

function recordedEvents(): string[] {
  return readFileSync(RECORDING, 'utf8')
    .split(/\r?\n\r?\n/)
    .map((block) => block.trim())
    .filter((block) => block !== '' && !block.startsWith('#'))
    .map((block) => `${block}\n\n`);
}

/**
 * The client, in a thread of its own as an app would be in a process of its own: on the server's
 * thread its reads would wait for whatever the server does after writing the first token (the rest of
 * the turn, the commit), which is not time to first token. It times one streamed request per message,
 * from sending it to the arrival of its first token, and answers once the stream has ended, so the next
 * request finds the keep-alive connection free.
 */
const CLIENT = `
const { parentPort } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
parentPort.on('message', ({ url, body, headers, token }) => {
  const begun = performance.now();
  let seen = '';
  let first = null;
  const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
    res.setEncoding('utf8');
    res.on('data', (chunk) => {
      if (first !== null) return;
      seen += chunk;
      if (seen.includes(token)) first = performance.now() - begun;
    });
    res.on('end', () => parentPort.postMessage(first === null ? { error: 'HTTP ' + res.statusCode + ' without a first token from ' + url } : { ms: first }));
  });
  req.on('error', (error) => parentPort.postMessage({ error: String(error) }));
  req.end(body);
});
`;

function startClient(): {
  timeToFirstToken(url: string, body: string, headers: Record<string, string>): Promise<number>;
  close(): Promise<number>;
} {
  const worker = new Worker(CLIENT, { eval: true });
  return {
    timeToFirstToken: (url, body, headers) =>
      new Promise((resolve, reject) => {
        worker.once('message', (answer: { ms?: number; error?: string }) =>
          answer.ms === undefined ? reject(new Error(answer.error)) : resolve(answer.ms),
        );
        worker.postMessage({ url, body, headers, token: FIRST_TOKEN });
      }),
    close: () => worker.terminate(),
  };
}

async function settle(context: { flush(): Promise<void> }): Promise<void> {
  await context.flush();
  await new Promise((resolve) => setTimeout(resolve, 2));
}

export async function benchGateway(opts: SuiteOptions): Promise<Figure[]> {
  const rounds = opts.quick ? 20 : 400;
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-gateway-'));
  const events = recordedEvents();
  const upstream = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      for (const event of events) res.write(event);
      res.end();
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  const context = openTraceContext({ dbPath: join(dir, 'metis.db') });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: { providers: { openai: { base_url: `${upstreamUrl}/v1`, api_key: 'sk-bench' } } },
  });
  const keystorePath = join(dir, 'gateway-keys.json');
  const { value } = issueKey(keystorePath, {
    name: 'bench',
    workspacePath: dir,
    models: null,
    dailyUsd: null,
    monthlyUsd: null,
    userId: null,
    teamId: null,
  });
  const metis = await startServer(runtime, context, {
    port: 0,
    logger: silentLogger(),
    gateway: { config: GatewayConfigSchema.parse({}), keystorePath },
  });
  const client = startClient();
  const body = JSON.stringify({
    model: 'openai:gpt-test',
    stream: true,
    messages: [{ role: 'user', content: 'say hello' }],
  });
  const viaMetis = () =>
    client.timeToFirstToken(`${metis.url}/v1/chat/completions`, body, {
      authorization: `Bearer ${value.secret}`,
    });
  const direct = () =>
    client.timeToFirstToken(`${upstreamUrl}/v1/chat/completions`, body, { authorization: 'Bearer sk-bench' });
  try {
    for (let i = 0; i < 20; i += 1) {
      await viaMetis(); // warm up both alike (JIT, connections, the SDK's client)
      await direct();
    }
    const gateway: number[] = [];
    const bare: number[] = [];
    // Interleaved, so that a slow spell of the machine falls on both alike. Each request is measured on
    // an idle server: what the one before left to do (its commit, the evaluator) is done first.
    for (let i = 0; i < rounds; i += 1) {
      await settle(context);
      gateway.push(await viaMetis());
      await settle(context);
      bare.push(await direct());
    }
    await context.flush();
    gateway.sort((a, b) => a - b);
    bare.sort((a, b) => a - b);
    const gatewayP50 = percentile(gateway, 50);
    const bareP50 = percentile(bare, 50);
    console.log(
      `  ${rounds} streamed chat completions each way, one at a time; p50 ${gatewayP50.toFixed(3)} ms through metis, ${bareP50.toFixed(3)} ms direct, p90 ${percentile(gateway, 90).toFixed(3)} / ${percentile(bare, 90).toFixed(3)} ms`,
    );
    return [
      figure({
        name: 'gateway: time to first token, p50',
        value: gatewayP50,
        unit: 'ms',
        baseline: { name: 'the fake upstream called directly, p50', value: bareP50 },
      }),
      figure({
        name: 'gateway: latency it adds to the first token, p50',
        value: Math.max(0, gatewayP50 - bareP50),
        unit: 'ms',
        baseline: { name: 'the fake upstream called directly, p50', value: bareP50 },
        target: { op: '<=', value: 2 },
      }),
    ];
  } finally {
    await client.close();
    await metis.close();
    await runtime.close();
    await context.close();
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  }
}
