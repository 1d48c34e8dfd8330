/**
 * `metis serve --nats` nodes for the cluster bench, as child processes run from source, each with its
 * own data folder, fast beats and one shared token (the nodes behind one load balancer share one).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import WebSocket from 'ws';
import { cliNodeArgs } from '../../test/helpers/cli-command.js';

const ROOT = join(import.meta.dirname, '../..');

export const BENCH_TOKEN = 'cluster-bench-token-0123456789abcdef';

/**
 * Deltas of a `slow:` turn on a bench node: 300 (3 s), or 100 in --quick, which checks that each figure
 * is made, not what it is (the suite's smoke test runs it).
 */
export function slowTokensFor(quick: boolean): number {
  return quick ? 100 : 300;
}

export interface BenchNode {
  readonly nodeId: string;
  readonly url: string;
  /** The node's process id: its CPU time is read from /proc (lib/cluster-cpu.ts). */
  readonly pid: number;
  kill(): Promise<void>;
  stop(): Promise<void>;
}

export async function startBenchNode(
  store: string,
  nats: string,
  nodeId: string,
  timing: { heartbeatMs: number; nodeTimeoutMs: number },
  /** Deltas a `slow:` turn streams, 10 ms apart (slowTokensFor). */
  slowTokens = slowTokensFor(false),
): Promise<BenchNode> {
  const home = mkdtempSync(join(tmpdir(), `metis-bench-${nodeId}-`));
  const config = join(home, 'metis.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      cluster: { heartbeat_ms: timing.heartbeatMs, node_timeout_ms: timing.nodeTimeoutMs },
      // `slow:` turns stream their deltas 10 ms apart: paced, so each delta's latency is its own.
      runtime: { scripted: { slow_tokens: slowTokens, slow_token_delay_ms: 10 } },
    }),
  );
  const child: ResultPromise = execa(
    process.execPath,
    [
      // Under the suite, the CLI it compiled (a node started under tsx pays ~0.6 s of CPU to transform).
      ...cliNodeArgs(),
      ...['serve', '--port', '0', '--json', '--config', config, '--store', store, '--nats', nats],
      ...['--node-id', nodeId],
    ],
    {
      cwd: ROOT,
      reject: false,
      stdin: 'ignore',
      env: { METIS_HOME: home, METIS_TOKEN: BENCH_TOKEN, NO_COLOR: '1' },
    },
  );
  let out = '';
  child.stdout!.on('data', (chunk) => {
    out += String(chunk);
  });
  const deadline = Date.now() + 60_000;
  while (!out.includes('\n')) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`node ${nodeId} did not start: ${out}${(await child).stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const url = (JSON.parse(out.split('\n')[0]!) as { url: string }).url;
  const end = async (signal: NodeJS.Signals) => {
    if (child.exitCode === null) child.kill(signal);
    await child;
    rmSync(home, { recursive: true, force: true });
  };
  return { nodeId, url, pid: child.pid!, kill: () => end('SIGKILL'), stop: () => end('SIGTERM') };
}

/** A JSON request to a bench node, with the shared token. */
export async function nodeRequest(url: string, method: string, path: string, body?: unknown): Promise<any> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${BENCH_TOKEN}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A stored or streamed event as a follower reads it from its frames. */
export interface FollowedEvent {
  readonly type: string;
  readonly timestamp: string;
  readonly turn_id: string | null;
}

/**
 * A client of `node` following a session with the full preset from now on (no snapshot): each event
 * handed to `onEvent` as it comes. Resolves once subscribed; the returned function drops the connection.
 */
export async function followSession(
  node: Pick<BenchNode, 'url'>,
  sessionId: string,
  onEvent: (event: FollowedEvent) => void,
): Promise<() => void> {
  const handshake = await nodeRequest(node.url, 'GET', `/sessions/${sessionId}`);
  const ws = new WebSocket(handshake.ws_url as string, {
    headers: { authorization: `Bearer ${BENCH_TOKEN}` },
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('error', reject);
    ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === 'subscribe_ack') resolve();
      if (frame.type === 'event') onEvent(frame.event);
    });
    ws.once('open', () =>
      ws.send(JSON.stringify({ type: 'subscribe', filter: 'preset:full', since: null, snapshot: false })),
    );
  });
  return () => ws.terminate();
}
