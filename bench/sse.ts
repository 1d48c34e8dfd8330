/**
 * The sse suite (issue 15 point 9): fan-out and latency of the SSE transport beside the WebSocket one,
 * in the same run, on one real `metis serve` stack (runtime, bus, writer, hub, HTTP server): N clients
 * of each transport follow one session while turns stream their deltas at full speed. Clients run in
 * the server's process, the same for both transports, so the ratio compares the transports, not
 * machines; the stream suite measures the WebSocket against bare `ws` with clients in workers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { startServer } from '../src/core/app/metis-server.js';
import { createRuntime } from '../src/core/runtime/runtime.js';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

interface Tally {
  deltas: number;
  done: number;
  readonly latenciesMs: number[];
}

/** Wall clock in ms with µs resolution, comparable with an event's `timestamp`. */
const nowMs = () => performance.timeOrigin + performance.now();

function observe(tally: Tally, frame: { type: string; event?: { type: string; timestamp: string } }): void {
  if (frame.type !== 'event' || frame.event === undefined) return;
  if (frame.event.type === 'text.delta') {
    tally.deltas += 1;
    tally.latenciesMs.push(nowMs() - Date.parse(frame.event.timestamp));
  } else if (frame.event.type === 'turn.completed') tally.done += 1;
}

async function webSocketClient(url: string, sessionId: string, tally: Tally): Promise<() => void> {
  const handshake = (await (await fetch(`${url}/sessions/${sessionId}`)).json()) as { ws_url: string };
  const ws = new WebSocket(handshake.ws_url);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const acked = new Promise<void>((resolve) =>
    ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === 'subscribe_ack') resolve();
      observe(tally, frame);
    }),
  );
  ws.send(JSON.stringify({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: false }));
  await acked;
  return () => ws.terminate();
}

async function sseClient(url: string, sessionId: string, tally: Tally): Promise<() => void> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/sessions/${sessionId}/events?snapshot=false`, (response) => {
      let pending = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        pending += chunk;
        let end = pending.indexOf('\n\n');
        while (end >= 0) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const data = block.split('\n').find((line) => line.startsWith('data: '));
          if (data !== undefined) {
            const frame = JSON.parse(data.slice(6));
            if (frame.type === 'subscribe_ack') resolve(() => req.destroy());
            observe(tally, frame);
          }
          end = pending.indexOf('\n\n');
        }
      });
    });
    req.on('error', reject);
    req.end();
  });
}

async function measure(
  transport: 'websocket' | 'sse',
  clients: number,
  deltas: number,
  turns: number,
): Promise<{ perSecond: number; p50: number; p99: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-sse-'));
  const context = openTraceContext({ dbPath: join(dir, 'metis.db') });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: { scripted: { token_delay_ms: 0, slow_token_delay_ms: 0, slow_tokens: deltas } },
  });
  const server = await startServer(runtime, context, { port: 0 });
  const closers: (() => void)[] = [];
  try {
    const session = runtime.createSession({ workspacePath: dir });
    const tally: Tally = { deltas: 0, done: 0, latenciesMs: [] };
    const connect = transport === 'sse' ? sseClient : webSocketClient;
    for (let i = 0; i < clients; i += 1) closers.push(await connect(server.url, session.id, tally));
    const started = performance.now();
    for (let turn = 0; turn < turns; turn += 1) {
      await runtime.submitTurn(session.id, `slow: round ${turn}`).done;
      while (tally.done < clients * (turn + 1)) await new Promise((resolve) => setTimeout(resolve, 1));
    }
    const seconds = (performance.now() - started) / 1000;
    const sorted = tally.latenciesMs.sort((a, b) => a - b);
    return { perSecond: tally.deltas / seconds, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  } finally {
    for (const close of closers) close();
    await server.close();
    await runtime.close();
    await context.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchSse(opts: SuiteOptions): Promise<Figure[]> {
  const clients = opts.quick ? 10 : 100;
  const deltas = opts.quick ? 200 : 1000;
  const turns = opts.quick ? 1 : 5;
  await measure('websocket', 2, 50, 1); // warm up both paths alike
  await measure('sse', 2, 50, 1);
  const ws = await measure('websocket', clients, deltas, turns);
  const sse = await measure('sse', clients, deltas, turns);
  console.log(
    `  ${clients} clients per transport, ${turns} turns of ${deltas} deltas; latency p50 ws ${ws.p50.toFixed(2)} ms, sse ${sse.p50.toFixed(2)} ms`,
  );
  return [
    figure({
      name: `SSE fan-out, deltas delivered per second (${clients} clients)`,
      value: sse.perSecond,
      unit: 'deltas/s',
      baseline: { name: 'the same over WebSocket', value: ws.perSecond },
      target: { op: '>=', value: Math.round(ws.perSecond * 0.5) },
    }),
    figure({
      name: `SSE delta latency p99 (${clients} clients)`,
      value: sse.p99,
      unit: 'ms',
      baseline: { name: 'the same over WebSocket', value: ws.p99 },
    }),
  ];
}
