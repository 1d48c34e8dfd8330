/**
 * The snapshot suite: what building a snapshot as of its own id costs (issue 14 obs. 1), against the
 * snapshot read from the runtime's live state (the `snapshot-live-state` fault, the code before), in
 * the same process on the same session: a session of many turns, as a late client finds it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createRuntime } from '../src/core/runtime/runtime.js';
import { storedEventBefore } from '../src/core/store/session-as-of.js';
import { sqliteStreamReads } from '../src/core/store/stream-reads.js';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { RecentStreams } from '../src/core/stream/recent-streams.js';
import { buildSnapshot } from '../src/core/stream/snapshot.js';
import { snapshotPoint } from '../src/core/stream/snapshot-point.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

export async function benchSnapshot(opts: SuiteOptions): Promise<Figure[]> {
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-snapshot-'));
  const context = openTraceContext({ dbPath: join(dir, 'metis.db'), validation: 'strict' });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: {
      tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
      scripted: { token_delay_ms: 0, slow_token_delay_ms: 0, slow_tokens: 10 },
    },
  });
  try {
    const turns = opts.quick ? 50 : 1_000;
    const session = runtime.createSession({ workspacePath: dir });
    for (let i = 0; i < turns; i += 1) await runtime.submitTurn(session.id, `question ${i}`).done;
    await context.flush();
    const events = context.db
      .prepare('SELECT count(*) FROM events WHERE session_id = ?')
      .pluck()
      .get(session.id);
    const recent = new RecentStreams();
    const at = storedEventBefore(context.db, [session.id], '~');
    const sessionIds = new Set([session.id]);
    const reads = sqliteStreamReads(context.store, runtime.sessions);
    // Awaited each time: the reads are asynchronous, as a network store's would be.
    const timeOf = async (build: () => Promise<unknown>): Promise<number[]> => {
      const samples: number[] = [];
      for (let i = 0; i < (opts.quick ? 20 : 200); i += 1) {
        const started = performance.now();
        await build();
        samples.push((performance.now() - started) * 1000);
      }
      return samples.sort((a, b) => a - b);
    };
    const live = await timeOf(() =>
      buildSnapshot(runtime, reads, recent, session.id, at, { snapshotLiveState: true }),
    );
    const asOf = await timeOf(async () => {
      const point = await snapshotPoint({
        runtime,
        reads,
        recent,
        sessionId: session.id,
        sessionIds,
        released: at,
        faults: {},
      });
      await buildSnapshot(runtime, reads, recent, session.id, point);
    });
    console.log(`  snapshot of a session of ${turns} turns, ${events} stored events`);
    return [
      figure({
        name: `snapshot as of its id p50 (${turns} turns)`,
        value: percentile(asOf, 50),
        unit: 'µs',
        baseline: { name: 'snapshot of live state p50', value: percentile(live, 50) },
        target: { op: '<=', value: 2_000 },
      }),
    ];
  } finally {
    await runtime.close();
    await context.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
