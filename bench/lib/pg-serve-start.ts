/**
 * The start-up of `metis serve` on PostgreSQL alone (issue 35): a real child, from spawning it until
 * `/healthz` answers 200, on the suite's large store and on one of a tenth of its events, alternately,
 * each the median of a few starts. With no working copy a start reads no more of a larger store, so
 * the two should match: targets ≤ 3 s on the large store and within ±20 % of the small one's. The
 * server's data folder (METIS_HOME) is measured after each stop: nothing in it may grow with the store.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { execa } from 'execa';
import { cliNodeArgs } from '../../test/helpers/cli-command.js';
import compileCli from '../../test/helpers/compiled-cli.js';
import { BENCH_TOKEN, type BenchNode } from './cluster-nodes.js';
import { type Figure, figure, percentile } from './stats.js';

const ROOT = join(import.meta.dirname, '../..');
/** A file larger on the large store than on the small one by more than this grows with the store. */
const GROWTH_SLACK_BYTES = 64 * 1024;

export interface BenchStore {
  readonly url: string;
  readonly events: number;
}

interface Start {
  readonly ms: number;
  /** Every file the server left in its data folder, by path inside it, in bytes. */
  readonly files: ReadonlyMap<string, number>;
}

function filesUnder(dir: string, base = dir): Map<string, number> {
  const files = new Map<string, number>();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const stat = statSync(path);
    if (stat.isDirectory()) for (const [inner, size] of filesUnder(path, base)) files.set(inner, size);
    else files.set(path.slice(base.length + 1), stat.size);
  }
  return files;
}

const sum = (files: ReadonlyMap<string, number>) => [...files.values()].reduce((a, b) => a + b, 0);

/** A `metis serve --store` child with a data folder of its own; stopping it removes the folder. */
export interface ServeChild extends BenchNode {
  /** Every file its data folder held once it exited, by path inside it, in bytes (null while it runs). */
  filesAtExit(): ReadonlyMap<string, number> | null;
}

/**
 * Spawns `metis serve --store <url>` (BENCH_TOKEN its token), the CLI compiled as the test suite
 * compiles it, and resolves once it printed its URL.
 */
export async function startServe(url: string): Promise<ServeChild & { spawnedAt: number }> {
  // Plain JavaScript, as `metis serve` is deployed: under tsx each start pays ~0.6 s to transform.
  if (!process.env.METIS_TEST_CLI) await compileCli();
  const home = mkdtempSync(join(tmpdir(), 'metis-bench-serve-'));
  const spawnedAt = performance.now();
  const child = execa(
    process.execPath,
    [...cliNodeArgs(), 'serve', '--port', '0', '--json', '--store', url],
    {
      cwd: ROOT,
      reject: false,
      stdin: 'ignore',
      env: { METIS_HOME: home, METIS_TOKEN: BENCH_TOKEN, NO_COLOR: '1' },
    },
  );
  let filesAtExit: ReadonlyMap<string, number> | null = null;
  const end = async (signal: NodeJS.Signals) => {
    if (child.exitCode === null) child.kill(signal);
    const ended = await child;
    // What it writes on the way out counts too.
    filesAtExit ??= filesUnder(home);
    rmSync(home, { recursive: true, force: true });
    if (signal === 'SIGTERM' && ended.exitCode !== 0)
      throw new Error(`metis serve exited ${ended.exitCode}: ${ended.stderr}`);
  };
  let out = '';
  child.stdout!.on('data', (chunk) => {
    out += String(chunk);
  });
  const deadline = Date.now() + 120_000;
  while (!out.includes('\n')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await end('SIGKILL');
      throw new Error(`metis serve did not start: ${out}${(await child).stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return {
    nodeId: 'serve',
    url: (JSON.parse(out.split('\n')[0]!) as { url: string }).url,
    pid: child.pid!,
    spawnedAt,
    filesAtExit: () => filesAtExit,
    kill: () => end('SIGKILL'),
    stop: () => end('SIGTERM'),
  };
}

/** Starts a server on `store`, waits for `/healthz` 200, stops it; its data folder as it left it. */
async function startOnce(store: BenchStore): Promise<Start> {
  const server = await startServe(store.url);
  try {
    const deadline = Date.now() + 120_000;
    for (;;) {
      const health = await fetch(`${server.url}/healthz`).catch(() => null);
      if (health?.status === 200) break;
      await health?.body?.cancel();
      if (Date.now() > deadline) throw new Error('metis serve never answered /healthz with 200');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const ms = performance.now() - server.spawnedAt;
    await server.stop();
    return { ms, files: server.filesAtExit()! };
  } catch (error) {
    await server.kill();
    throw error;
  }
}

/** Start-up on `large` and `small`, `runs` times each, alternately. */
export async function benchServeStart(large: BenchStore, small: BenchStore, runs: number): Promise<Figure[]> {
  const onLarge: Start[] = [];
  const onSmall: Start[] = [];
  for (let run = 0; run < runs; run += 1) {
    onLarge.push(await startOnce(large));
    onSmall.push(await startOnce(small));
  }
  const median = (starts: readonly Start[]) =>
    percentile(
      starts.map((start) => start.ms).sort((a, b) => a - b),
      50,
    );
  const largest = (starts: readonly Start[]) => Math.max(...starts.map((start) => sum(start.files)));
  const listing = (starts: readonly Start[]) => {
    const files = starts.at(-1)!.files;
    return files.size === 0
      ? 'no files'
      : [...files].map(([path, size]) => `${path} ${size.toLocaleString()} B`).join(', ');
  };
  const l = large.events.toLocaleString();
  const s = small.events.toLocaleString();
  console.log(
    `  serve start until /healthz: ${onLarge.map((x) => x.ms.toFixed(0)).join(', ')} ms on ${l} events; ${onSmall.map((x) => x.ms.toFixed(0)).join(', ')} ms on ${s}`,
  );
  console.log(
    `  data folder after a start and stop: on ${l} events ${listing(onLarge)}; on ${s} ${listing(onSmall)}`,
  );
  const largeMs = median(onLarge);
  const smallMs = median(onSmall);
  const smallBytes = largest(onSmall);
  return [
    figure({
      name: `metis serve on PostgreSQL alone: start until /healthz, store of ${l} events (median)`,
      value: largeMs,
      unit: 'ms',
      baseline: { name: `the same on a store of ${s} events`, value: smallMs },
      target: { op: '<=', value: 3_000 },
    }),
    figure({
      name: `metis serve start on ${l} events against ${s} (the ratio's distance from 1)`,
      value: smallMs === 0 ? 0 : Math.abs(largeMs / smallMs - 1),
      unit: '|ratio - 1|',
      target: { op: '<=', value: 0.2 },
    }),
    figure({
      name: `metis serve data folder after a start and stop, store of ${l} events`,
      value: largest(onLarge),
      unit: 'bytes',
      baseline: { name: `the same on a store of ${s} events`, value: smallBytes },
      target: { op: '<=', value: smallBytes + GROWTH_SLACK_BYTES },
    }),
  ];
}
