/**
 * The stream-archive suite: what keeping each session's streaming events in the database costs a turn
 * (issue 14 obs. 3), against the same turns with streaming events kept in memory only (the code
 * before, `--fault short-stream-window`), in the same process: turns of many deltas through the real
 * runtime, bus, trace writer, sequencer and hub, each on its own database file.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createRuntime } from '../src/core/runtime/runtime.js';
import { SqliteStreamArchiveRows } from '../src/core/store/stream-archive-rows.js';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { EventSequencer } from '../src/core/stream/event-sequencer.js';
import { StreamArchive } from '../src/core/stream/stream-archive.js';
import { StreamHub } from '../src/core/stream/stream-hub.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

const DELTAS_PER_TURN = 400;

/** Per-turn wall times (ms, sorted) of `turns` turns of DELTAS_PER_TURN deltas each. */
async function turnTimes(turns: number, archived: boolean): Promise<{ times: number[]; rows: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-archive-'));
  const context = openTraceContext({ dbPath: join(dir, 'metis.db'), validation: 'strict' });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: { scripted: { token_delay_ms: 0, slow_token_delay_ms: 0, slow_tokens: DELTAS_PER_TURN } },
  });
  const sequencer = new EventSequencer(context.bus, context.writer, runtime.streaming);
  const hub = new StreamHub(
    sequencer,
    runtime.sessions,
    archived ? new StreamArchive(new SqliteStreamArchiveRows(context.db)) : null,
  );
  try {
    const session = runtime.createSession({ workspacePath: dir });
    const times: number[] = [];
    for (let i = 0; i < turns; i += 1) {
      const started = performance.now();
      await runtime.submitTurn(session.id, `slow: question ${i}`).done;
      await context.flush();
      times.push(performance.now() - started);
    }
    const rows = context.db.prepare('SELECT count(*) FROM stream_events').pluck().get() as number;
    return { times: times.sort((a, b) => a - b), rows };
  } finally {
    hub.close();
    sequencer.close();
    await runtime.close();
    await context.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchStreamArchive(opts: SuiteOptions): Promise<Figure[]> {
  const turns = opts.quick ? 5 : 60;
  await turnTimes(2, true); // warm up the JIT for both paths alike
  const memory = await turnTimes(turns, false);
  const archived = await turnTimes(turns, true);
  console.log(`  ${turns} turns of ${DELTAS_PER_TURN} deltas; ${archived.rows} archived rows`);
  const memoryPerDelta = (percentile(memory.times, 50) * 1000) / DELTAS_PER_TURN;
  const archivedPerDelta = (percentile(archived.times, 50) * 1000) / DELTAS_PER_TURN;
  // A model streams a delta every few milliseconds: what matters is the archive's cost per delta,
  // against what the rest of the pipeline (runtime, bus, writer, hub) spends on the same delta.
  return [
    figure({
      name: 'archive cost per streaming event (p50 turns)',
      value: archivedPerDelta - memoryPerDelta,
      unit: 'µs',
      baseline: { name: 'pipeline per delta, memory only', value: memoryPerDelta },
      target: { op: '<=', value: 25 },
    }),
  ];
}
