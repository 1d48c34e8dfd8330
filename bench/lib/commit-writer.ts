/**
 * The writer process of the store benchmark's prune figure: `node --import tsx commit-writer.ts <db>`.
 *
 * Emits ~1 event per millisecond (RATE per second, catching up after a late timer) through
 * openTraceContext and times each one from emit to the trace writer's commit listener. Prints `ready`
 * once open; when its stdin closes it stops, flushes, and prints one line per committed event,
 * `<emit wall-clock ms> <commit latency µs>`, then `done <emitted> <committed> <dropped> <retries>`.
 * Latencies are kept in memory until the end so that writing them cannot slow the commits measured.
 */
import { performance } from 'node:perf_hooks';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { benchInput } from './store-fixtures.js';

const RATE_PER_SECOND = 1_000;
/** At most this many catch-up emits per timer tick, so a long stall does not turn into one burst. */
const MAX_PER_TICK = 50;
const SESSION_ID = 'sess_bench_writer';

const dbPath = process.argv[2];
if (!dbPath) throw new Error('usage: commit-writer <db>');

const context = openTraceContext({ dbPath, create: false, validation: 'strict' });
await context.flush();

/** Emit times by event id: hrtime for the latency, wall-clock ms to place the event in a phase. */
const pending = new Map<string, { hr: bigint; wallMs: number }>();
const emitWallMs: number[] = [];
const latencyUs: number[] = [];

context.writer.onCommit((batch) => {
  const now = process.hrtime.bigint();
  for (const event of batch) {
    const started = pending.get(event.id);
    if (started === undefined) continue;
    pending.delete(event.id);
    emitWallMs.push(started.wallMs);
    latencyUs.push(Number(now - started.hr) / 1000);
  }
});
context.writer.onDrop((batch) => {
  for (const event of batch) pending.delete(event.id);
});

let emitted = 0;
let parentId: string | null = null;
const startedAt = performance.now();

function tick(): void {
  const due = Math.floor(((performance.now() - startedAt) * RATE_PER_SECOND) / 1000) - emitted;
  for (let n = 0; n < Math.min(due, MAX_PER_TICK); n += 1) {
    const wallMs = performance.timeOrigin + performance.now();
    const hr = process.hrtime.bigint();
    const event = context.bus.emit(benchInput(emitted, SESSION_ID, parentId));
    if (event === null) throw new Error('the bus dropped a benchmark event');
    pending.set(event.id, { hr, wallMs });
    parentId = event.id;
    emitted += 1;
  }
}

const timer = setInterval(tick, 1);
process.stdout.write('ready\n');

process.stdin.resume();
process.stdin.on('end', () => {
  void (async () => {
    clearInterval(timer);
    await context.close();
    const lines: string[] = [];
    for (let i = 0; i < latencyUs.length; i += 1) {
      lines.push(`${emitWallMs[i]!.toFixed(3)} ${latencyUs[i]!.toFixed(1)}`);
    }
    lines.push(
      `done ${emitted} ${latencyUs.length} ${context.writer.stats.droppedEvents} ${context.writer.stats.retries}`,
    );
    process.stdout.write(`${lines.join('\n')}\n`, () => process.exit(0));
  })();
});
