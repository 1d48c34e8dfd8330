import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { openTraceContext } from '../src/core/store/trace-context.js';
import { collectGarbage, type Figure, figure } from './lib/stats.js';
import { benchInput, removeDir, tempStoreDir } from './lib/store-fixtures.js';

/** Events emitted between two turns of the event loop: a busy server's steady stream, not a burst. */
export const SUSTAINED_CHUNK = 100;
const CHUNK = SUSTAINED_CHUNK;
const SESSIONS = 10;

/**
 * Sustained ingest (issue 19 point 6): events emitted a hundred at a time with a turn of the event
 * loop between chunks, never waiting for a commit, as a server streaming many turns does; events/s
 * until the last is committed, against raw inserts of the same rows in transactions of a chunk (each
 * tick's events commit together), with the burst figure of the same run beside it. The event loop's
 * p99 delay meanwhile says how long the writer holds the emitting thread.
 */
export async function benchSustainedIngest(
  events: number,
  rawChunkRate: number,
  burstRate: number,
): Promise<Figure[]> {
  const dir = tempStoreDir();
  const context = openTraceContext({ dbPath: join(dir, 'sustained.db'), validation: 'strict' });
  try {
    await context.flush();
    const inputs = Array.from({ length: events }, (_, i) =>
      benchInput(i, `sess_bench_${i % SESSIONS}`, null),
    );
    const delay = monitorEventLoopDelay({ resolution: 1 });
    collectGarbage();
    delay.enable();
    const began = performance.now();
    for (let done = 0; done < events; ) {
      const end = Math.min(done + CHUNK, events);
      for (; done < end; done += 1) context.bus.emit(inputs[done]!);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await context.flush();
    const seconds = (performance.now() - began) / 1000;
    delay.disable();
    const { committedEvents, committedBatches } = context.writer.stats;
    console.log(
      `  (sustained: ${committedEvents.toLocaleString('en-US')} events in ${committedBatches.toLocaleString('en-US')} commits, ${Math.round(events / seconds).toLocaleString('en-US')} events/s against ${Math.round(burstRate).toLocaleString('en-US')} in 1,000-event bursts; event loop delay p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms)`,
    );
    return [
      figure({
        name: `sustained ingest through the bus (${CHUNK}-event chunks, no waiting)`,
        value: events / seconds,
        unit: 'events/s',
        baseline: { name: `raw INSERT, ${CHUNK} rows/transaction`, value: rawChunkRate },
      }),
    ];
  } finally {
    await context.close();
    removeDir(dir);
  }
}
