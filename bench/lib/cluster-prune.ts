/**
 * The cluster suite's retention figures (issue 35, operations online): `metis trace prune --store` of
 * a store holding N old events (loaded before the nodes start; a node's working copy holds only the
 * sessions it runs or reads, so the prune's work is the store's) while three nodes serve turns. Each node runs turns one after another on its own session; every
 * accepted turn request is timed from send to its 202 (`turn.started` stored), before the prune (the
 * baseline) and while it runs. Targets: p99 while pruning ≤ 50 ms, and no failed request.
 */
import { performance } from 'node:perf_hooks';
import { purgePostgres } from '../../src/core/store/postgres/pg-prune.js';
import { retentionCutoffUs } from '../../src/core/store/retention.js';
import { BENCH_TOKEN, type BenchNode } from './cluster-nodes.js';
import { type Figure, figure, percentile } from './stats.js';

export { loadOldEvents } from '../../test/helpers/pg-old-events.js';

interface Writer {
  readonly latenciesMs: number[];
  failures: number;
  stop(): Promise<void>;
}

/** Turns one after another on a session of `node`, each accepted request timed until its 202. */
async function startWriter(
  node: BenchNode,
  phase: () => 'before' | 'pruning' | 'after',
): Promise<{
  before: Writer;
  pruning: Writer;
  stop(): Promise<void>;
}> {
  const headers = { authorization: `Bearer ${BENCH_TOKEN}`, 'content-type': 'application/json' };
  const created = await fetch(`${node.url}/sessions`, { method: 'POST', headers, body: '{}' });
  const sessionId = ((await created.json()) as { session_id: string }).session_id;
  const writers = {
    before: { latenciesMs: [] as number[], failures: 0, stop: async () => {} },
    pruning: { latenciesMs: [] as number[], failures: 0, stop: async () => {} },
  };
  let running = true;
  const loop = (async () => {
    while (running) {
      const at = phase();
      const began = performance.now();
      const answer = await fetch(`${node.url}/sessions/${sessionId}/turns`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ message: 'hello' }),
      }).catch(() => null);
      const took = performance.now() - began;
      // A session runs one turn at a time: the last one still running is no failure, just a wait.
      if (answer?.status === 409) {
        await answer.body?.cancel();
        await new Promise((resolve) => setTimeout(resolve, 10));
        continue;
      }
      const target = at === 'after' ? null : writers[at];
      if (answer === null || answer.status !== 202) {
        if (target !== null) target.failures += 1;
        await answer?.body?.cancel();
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      await answer.body?.cancel();
      target?.latenciesMs.push(took);
    }
  })();
  return {
    ...writers,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

export async function benchPruneWhileServing(
  options: { quick: boolean },
  store: string,
  nodes: readonly BenchNode[],
  /** How long the prune waits for a server to record its sweep (pg-prune.ts; its default when absent). */
  recordWaitMs?: number,
): Promise<Figure[]> {
  let phase: 'before' | 'pruning' | 'after' = 'before';
  const writers = await Promise.all(nodes.map((node) => startWriter(node, () => phase)));
  await new Promise((resolve) => setTimeout(resolve, options.quick ? 1_000 : 5_000));
  phase = 'pruning';
  const began = performance.now();
  const result = await purgePostgres({
    url: store,
    cutoffUs: retentionCutoffUs(30),
    dryRun: false,
    batchSize: 5_000,
    ...(recordWaitMs === undefined ? {} : { recordWaitMs }),
  }).finally(() => {
    phase = 'after';
  });
  const pruneSeconds = (performance.now() - began) / 1000;
  for (const writer of writers) await writer.stop();
  const sorted = (list: number[]) => [...list].sort((a, b) => a - b);
  const before = sorted(writers.flatMap((w) => w.before.latenciesMs));
  const during = sorted(writers.flatMap((w) => w.pruning.latenciesMs));
  const failedBefore = writers.reduce((sum, w) => sum + w.before.failures, 0);
  const failedDuring = writers.reduce((sum, w) => sum + w.pruning.failures, 0);
  const serving = nodes.length === 1 ? 'one server' : `${nodes.length} nodes`;
  console.log(
    `  prune: ${result.rows_deleted.toLocaleString()} events in ${pruneSeconds.toFixed(1)} s beside ${serving} serving; ${during.length} turn requests during it, ${before.length} before; trace.swept recorded by ${result.recorded_by_server ?? 'none yet'}`,
  );
  return [
    figure({
      name: `turn request p99 while pruning ${result.rows_deleted.toLocaleString()} events on PostgreSQL (${serving} serving)`,
      value: percentile(during, 99),
      unit: 'ms',
      baseline: { name: 'the same requests before the prune', value: percentile(before, 99) },
      target: { op: '<=', value: 50 },
    }),
    figure({
      name: 'turn requests failed while pruning',
      value: failedDuring,
      unit: 'requests',
      baseline: { name: 'failed before the prune', value: failedBefore },
      target: { op: '<=', value: 0 },
    }),
  ];
}
