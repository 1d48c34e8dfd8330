/**
 * The http suite: what metis's HTTP layer (security checks, CORS, token gate, declared routes, JSON
 * answers) costs per request, against a bare node:http server answering the same JSON, in the same run
 * with the same keep-alive client (docs/decisions.md "The HTTP layer on Fastify").
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startServer } from '../src/core/app/metis-server.js';
import { createRuntime } from '../src/core/runtime/runtime.js';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { type Figure, figure, type SuiteOptions } from './lib/stats.js';

const CONCURRENCY = 16;

/** Requests per second of `total` GETs of `url`, CONCURRENCY at a time over keep-alive connections. */
async function rate(url: string, total: number, headers: Record<string, string> = {}): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let started = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const req = request(url, { agent, headers }, (response) => {
        response.resume();
        response.on('end', () =>
          response.statusCode === 200 ? resolve() : reject(new Error(`${response.statusCode}`)),
        );
      });
      req.on('error', reject);
      req.end();
    });
  const worker = async () => {
    while (started < total) {
      started += 1;
      await one();
    }
  };
  const begun = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - begun) / 1000;
  agent.destroy();
  return total / seconds;
}

export async function benchHttp(opts: SuiteOptions): Promise<Figure[]> {
  const total = opts.quick ? 500 : 20_000;
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-http-'));
  const context = openTraceContext({ dbPath: join(dir, 'metis.db') });
  const runtime = createRuntime({ bus: context.bus, store: context.port });
  const metis = await startServer(runtime, context, { port: 0, bearerToken: 'bench-token-0123456789abcdef' });
  // /healthz does no storage work: what is measured is the HTTP layer itself.
  const body = JSON.stringify({ status: 'ok' });
  const bare = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
  try {
    const auth = { authorization: 'Bearer bench-token-0123456789abcdef' };
    const bareUrl = `http://127.0.0.1:${(bare.address() as AddressInfo).port}/healthz`;
    await rate(`${metis.url}/healthz`, 200, auth); // warm up both alike
    await rate(bareUrl, 200);
    const metisRate = await rate(`${metis.url}/healthz`, total, auth);
    const bareRate = await rate(bareUrl, total);
    console.log(`  ${total} GET /healthz with a bearer token, ${CONCURRENCY} at a time over keep-alive`);
    return [
      figure({
        name: 'GET /healthz through the whole HTTP layer',
        value: metisRate,
        unit: 'req/s',
        baseline: { name: 'bare node:http answering the same JSON', value: bareRate },
        target: { op: '>=', value: Math.round(bareRate * 0.5) },
      }),
    ];
  } finally {
    bare.close();
    await metis.close();
    await runtime.close();
    await context.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
