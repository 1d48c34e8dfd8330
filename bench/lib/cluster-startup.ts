/**
 * The cluster suite's start-up figures (issue 35): a node's start, from spawning `metis serve --nats`
 * until its `/healthz` answers 200, on a store of N events and on one of N/10, each the median of a
 * few starts. A node's working copy starts with its own sessions only (src/core/store/postgres/
 * node-copy.ts), so the two should match: targets ≤ 3 s on the large store, and within ±20 % of the
 * small one's.
 */
import { performance } from 'node:perf_hooks';
import { freshDatabase, type PostgresServer } from '../../test/helpers/postgres.js';
import { startBenchNode } from './cluster-nodes.js';
import { loadOldEvents } from './cluster-prune.js';
import { type Figure, figure, percentile } from './stats.js';

/** Starts a node on `store`, waits until `/healthz` answers 200, stops it: the milliseconds it took. */
async function startOnce(
  store: string,
  nats: string,
  nodeId: string,
  timing: { heartbeatMs: number; nodeTimeoutMs: number },
): Promise<number> {
  const began = performance.now();
  const node = await startBenchNode(store, nats, nodeId, timing);
  try {
    for (;;) {
      const health = await fetch(`${node.url}/healthz`).catch(() => null);
      if (health?.status === 200) return performance.now() - began;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } finally {
    await node.stop();
  }
}

/**
 * Starts a node `runs` times on `largeStore` (holding `largeEvents`) and on a new store of a tenth of
 * them, alternately, and compares the medians.
 */
export async function benchNodeStart(
  postgres: PostgresServer,
  nats: string,
  largeStore: string,
  largeEvents: number,
  timing: { heartbeatMs: number; nodeTimeoutMs: number },
  runs: number,
): Promise<Figure[]> {
  const smallEvents = Math.max(1, Math.floor(largeEvents / 10));
  const smallStore = freshDatabase(postgres);
  await loadOldEvents(smallStore, smallEvents);
  const large: number[] = [];
  const small: number[] = [];
  for (let run = 0; run < runs; run += 1) {
    large.push(await startOnce(largeStore, nats, `start-large-${run}`, timing));
    small.push(await startOnce(smallStore, nats, `start-small-${run}`, timing));
  }
  const median = (list: number[]) =>
    percentile(
      [...list].sort((x, y) => x - y),
      50,
    );
  console.log(
    `  node start until /healthz: ${large.map((ms) => ms.toFixed(0)).join(', ')} ms on ${largeEvents.toLocaleString()} events; ${small.map((ms) => ms.toFixed(0)).join(', ')} ms on ${smallEvents.toLocaleString()}`,
  );
  const onLarge = median(large);
  const onSmall = median(small);
  return [
    figure({
      name: `node start until /healthz, store of ${largeEvents.toLocaleString()} events`,
      value: onLarge,
      unit: 'ms',
      baseline: { name: `the same on a store of ${smallEvents.toLocaleString()} events`, value: onSmall },
      target: { op: '<=', value: 3_000 },
    }),
    figure({
      name: `node start on ${largeEvents.toLocaleString()} events against ${smallEvents.toLocaleString()} (1.0 = independent of the store's size)`,
      value: onSmall === 0 ? 0 : Math.abs(onLarge / onSmall - 1),
      unit: '|ratio - 1|',
      target: { op: '<=', value: 0.2 },
    }),
  ];
}
