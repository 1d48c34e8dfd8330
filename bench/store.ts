/**
 * The trace store benchmark (issue 3 item 11), every figure against a baseline measured in the same run:
 *
 *   1. committed single-row insert latency, emit → commit listener through openTraceContext, against a
 *      raw better-sqlite3 INSERT in its own transaction on an identical table (spec: p95 < 1 ms);
 *   2. group-commit throughput through the bus with ~300-byte payloads and every index, against raw
 *      inserts of the same rows in transactions of 1,000 (target ≥ 0.8× raw);
 *      beside it, sustained ingest: the same events emitted 100 at a time without waiting (store-sustained.ts);
 *   3. replay of 10,000 events of one session out of 1,000,000 in 50 interleaved sessions, as the server
 *      replays (TraceStore.replayJson, then the event frame around each envelope), warm and cold, against the spec's §7.1 rowid layout (target ≤ 30 ms warm);
 *   4. prune of every one of those 1,000,000 (old) events while another process commits 1,000 events/s:
 *      that writer's p99 commit latency against its p99 with no prune running (target ≤ 50 ms, and no
 *      write may fail).
 *
 * `--quick` shrinks every size (100,000 stored events, 1,000 replayed) and does not drop the page cache.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { monotonicFactory } from 'ulid';
import type { EmitInput } from '../src/core/bus/event-bus.js';
import { SYSTEM_SESSION_ID } from '../src/core/events/envelope.js';
import { type Db, openDatabase } from '../src/core/store/database.js';
import { purgeOldEvents } from '../src/core/store/retention.js';
import { openTraceContext, type TraceContext } from '../src/core/store/trace-context.js';
import { TraceStore } from '../src/core/store/trace-store.js';
import { collectGarbage, type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';
import {
  BENCH_EVENT_TYPE,
  benchInput,
  benchPayload,
  dropPageCache,
  fillSyntheticStore,
  fsyncFile,
  INSERT_COLUMNS,
  INSERT_SQL,
  openSpecLayoutDb,
  recordGapScan,
  removeDir,
  residentBytes,
  tempStoreDir,
} from './lib/store-fixtures.js';
import { benchSustainedIngest, SUSTAINED_CHUNK } from './store-sustained.js';

const LATENCY_SESSION = 'sess_bench_latency';

export async function benchStore(opts: SuiteOptions): Promise<Figure[]> {
  const figures: Figure[] = [];
  figures.push(...(await benchCommitLatency(opts)));
  collectGarbage();
  figures.push(...(await benchGroupCommit(opts)));
  collectGarbage();
  figures.push(...(await benchReplayAndPrune(opts)));
  return figures;
}

// ---------------------------------------------------------------------------------------------------
// 1. Single-row committed insert latency

async function benchCommitLatency(opts: SuiteOptions): Promise<Figure[]> {
  const iterations = opts.quick ? 400 : 4_000;
  const warmup = opts.quick ? 100 : 500;
  /** Raw and bus samples alternate in chunks, so drift in machine load hits both alike. */
  const chunk = 100;
  const dir = tempStoreDir();
  let context: TraceContext | null = null;
  let raw: Db | null = null;
  try {
    raw = openDatabase(join(dir, 'raw.db'), { create: true });
    const rawDb = raw;
    rawDb
      .prepare('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)')
      .run(LATENCY_SESSION, 0, 0);
    const rawInsert = rawDb.prepare(INSERT_SQL);
    const rawCommit = rawDb.transaction((params: unknown[]) => rawInsert.run(params));
    const rawRow = rawRowFactory(LATENCY_SESSION);

    context = openTraceContext({ dbPath: join(dir, 'bus.db'), validation: 'strict' });
    const ctx = context;
    await ctx.flush();
    let onCommitted: ((at: bigint) => void) | null = null;
    ctx.writer.onCommit(() => {
      const at = process.hrtime.bigint();
      onCommitted?.(at);
      onCommitted = null;
    });
    let parentId: string | null = null;
    let n = 0;
    const busOnce = async (): Promise<number> => {
      const committed = new Promise<bigint>((resolve) => {
        onCommitted = resolve;
      });
      const t0 = process.hrtime.bigint();
      const event = ctx.bus.emit(benchInput(n, LATENCY_SESSION, parentId));
      const t1 = await committed;
      parentId = event?.id ?? null;
      n += 1;
      return Number(t1 - t0) / 1000;
    };
    const rawOnce = (): number => {
      const params = rawRow();
      const t0 = process.hrtime.bigint();
      rawCommit.immediate(params);
      return Number(process.hrtime.bigint() - t0) / 1000;
    };

    for (let i = 0; i < warmup; i += 1) {
      rawOnce();
      await busOnce();
    }
    const rawSamples: number[] = [];
    const busSamples: number[] = [];
    for (let done = 0; done < iterations; done += chunk) {
      for (let i = 0; i < chunk; i += 1) rawSamples.push(rawOnce());
      for (let i = 0; i < chunk; i += 1) busSamples.push(await busOnce());
    }
    if (ctx.writer.stats.droppedEvents > 0) throw new Error('the trace writer dropped events');
    rawSamples.sort((a, b) => a - b);
    busSamples.sort((a, b) => a - b);
    return [
      figure({
        name: 'committed insert p50 (emit → onCommit)',
        value: percentile(busSamples, 50),
        unit: 'µs',
        baseline: { name: 'raw INSERT + COMMIT p50', value: percentile(rawSamples, 50) },
      }),
      figure({
        name: 'committed insert p95 (emit → onCommit)',
        value: percentile(busSamples, 95),
        unit: 'µs',
        baseline: { name: 'raw INSERT + COMMIT p95', value: percentile(rawSamples, 95) },
        target: { op: '<=', value: 1_000 },
      }),
    ];
  } finally {
    await context?.close();
    raw?.close();
    removeDir(dir);
  }
}

/** Parameter arrays for raw inserts into one session: fresh ids, chained parents, rotating payloads. */
function rawRowFactory(sessionId: string): () => unknown[] {
  const nextUlid = monotonicFactory(Math.random);
  const payloads = Array.from({ length: 256 }, (_, i) => JSON.stringify(benchPayload(i)));
  let seq = 0;
  let parent: string | null = null;
  return () => {
    const ms = Date.now();
    const id = `evt_${nextUlid(ms)}`;
    seq += 1;
    const params = [
      sessionId,
      id,
      seq,
      ms * 1000,
      `turn_bench_raw_${Math.floor(seq / 20)}`,
      parent,
      BENCH_EVENT_TYPE,
      'agent',
      'pseudonymous',
      payloads[seq % payloads.length]!,
    ];
    parent = id;
    return params;
  };
}

// ---------------------------------------------------------------------------------------------------
// 2. Group-commit throughput

const BURST = 1_000;
const THROUGHPUT_SESSIONS = 10;

async function benchGroupCommit(opts: SuiteOptions): Promise<Figure[]> {
  const events = opts.quick ? 20_000 : 100_000;
  const rounds = opts.quick ? 1 : 3;
  const busRates: number[] = [];
  const rawRates: number[] = [];
  const rawChunkRates: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    const dir = tempStoreDir();
    try {
      const busPath = join(dir, 'bus.db');
      busRates.push(await busThroughput(busPath, events));
      // The raw side inserts exactly the rows the bus stored, read back after the bus run: keeping the
      // committed events in memory during it would make the bus pay for their garbage collection.
      const db = openDatabase(busPath, { readonly: true });
      const rows = db
        .prepare(`SELECT ${INSERT_COLUMNS} FROM events WHERE session_id != ? ORDER BY id`)
        .raw()
        .all(SYSTEM_SESSION_ID) as unknown[][];
      db.close();
      if (rows.length !== events) throw new Error(`bus throughput: ${rows.length} of ${events} rows stored`);
      rawRates.push(rawThroughput(join(dir, 'raw.db'), rows));
      rawChunkRates.push(rawThroughput(join(dir, 'raw-chunks.db'), rows, SUSTAINED_CHUNK));
    } finally {
      removeDir(dir);
    }
  }
  return [
    ...(await benchSustainedIngest(events, median(rawChunkRates), median(busRates))),
    figure({
      name: `group commit through the bus (${BURST.toLocaleString('en-US')}-event bursts)`,
      value: median(busRates),
      unit: 'events/s',
      baseline: { name: 'raw INSERT, 1,000 rows/transaction', value: median(rawRates) },
      target: { op: '>=', value: 0.8 * median(rawRates) },
    }),
  ];
}

/** Emits `events` in bursts of BURST, flushing after each: every burst is one group commit. */
async function busThroughput(dbPath: string, events: number): Promise<number> {
  const context = openTraceContext({ dbPath, validation: 'strict' });
  try {
    await context.flush();
    // Inputs are built before the clock starts; only the parent link is filled in at emit time.
    const inputs: { -readonly [K in keyof EmitInput]: EmitInput[K] }[] = [];
    for (let i = 0; i < events; i += 1) {
      inputs.push({ ...benchInput(i, `sess_bench_${i % THROUGHPUT_SESSIONS}`, null) });
    }
    const parents = new Array<string | null>(THROUGHPUT_SESSIONS).fill(null);
    const { stats } = context.writer;
    const [eventsBefore, batchesBefore] = [stats.committedEvents, stats.committedBatches];
    collectGarbage();
    const start = performance.now();
    for (let done = 0; done < events; ) {
      const end = Math.min(done + BURST, events);
      for (; done < end; done += 1) {
        const k = done % THROUGHPUT_SESSIONS;
        const input = inputs[done]!;
        input.parent_event_id = parents[k]!;
        parents[k] = context.bus.emit(input)?.id ?? null;
      }
      await context.flush();
    }
    const seconds = (performance.now() - start) / 1000;
    const committed = stats.committedEvents - eventsBefore;
    const batches = stats.committedBatches - batchesBefore;
    if (committed !== events || stats.droppedEvents > 0) {
      throw new Error(`bus throughput: ${committed} of ${events} events committed`);
    }
    if (batches !== Math.ceil(events / BURST)) {
      throw new Error(`bus throughput: ${batches} commits for ${Math.ceil(events / BURST)} bursts`);
    }
    return events / seconds;
  } finally {
    await context.close();
  }
}

/** The same rows, raw, in transactions of `perTransaction` into a fresh database with the same schema. */
function rawThroughput(dbPath: string, rows: readonly unknown[][], perTransaction = BURST): number {
  const db = openDatabase(dbPath, { create: true });
  try {
    const sessions = [...new Set(rows.map((r) => r[0] as string))];
    const insertSession = db.prepare(
      'INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)',
    );
    for (const id of sessions) insertSession.run(id, 0, 0);
    const insert = db.prepare(INSERT_SQL);
    const commit = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i += 1) insert.run(rows[i]!);
    });
    collectGarbage();
    const start = performance.now();
    for (let from = 0; from < rows.length; from += perTransaction) {
      commit.immediate(from, Math.min(from + perTransaction, rows.length));
    }
    return rows.length / ((performance.now() - start) / 1000);
  } finally {
    db.close();
  }
}

// ---------------------------------------------------------------------------------------------------
// 3. Replay, warm and cold; 4. prune under a concurrent writer (same store)

const REPLAY_SESSIONS = 50;
const REPLAY_TARGET_SESSION = 17;
const REPLAY_CAP = 10_000;

async function benchReplayAndPrune(opts: SuiteOptions): Promise<Figure[]> {
  const events = opts.quick ? 100_000 : 1_000_000;
  const replayCount = Math.min(REPLAY_CAP, Math.floor(events / REPLAY_SESSIONS / 2));
  const dir = tempStoreDir();
  const metisPath = join(dir, 'metis.db');
  const specPath = join(dir, 'spec-7.1.db');
  try {
    const buildStart = performance.now();
    const metisDb = openDatabase(metisPath, { create: true });
    const specDb = openSpecLayoutDb(specPath);
    const synthetic = fillSyntheticStore([metisDb, specDb], {
      events,
      sessions: REPLAY_SESSIONS,
      ageDays: 365,
    });
    recordGapScan(metisDb, synthetic);
    const sessionId = synthetic.sessionIds[REPLAY_TARGET_SESSION]!;
    const afterId = metisDb
      .prepare('SELECT id FROM events WHERE session_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?')
      .pluck()
      .get(sessionId, replayCount) as string;
    metisDb.close();
    specDb.close();
    fsyncFile(metisPath);
    fsyncFile(specPath);
    console.log(
      `  (built two ${events.toLocaleString('en-US')}-event stores in ${((performance.now() - buildStart) / 1000).toFixed(1)} s)`,
    );

    const label = `${replayCount.toLocaleString('en-US')} of ${events.toLocaleString('en-US')} events, ${REPLAY_SESSIONS} sessions`;
    const replayFigures = benchReplay(opts, { metisPath, specPath, sessionId, afterId, replayCount, label });
    collectGarbage();
    const pruneFigures = await benchPrune(opts, metisPath, events);
    return [...replayFigures, ...pruneFigures];
  } finally {
    removeDir(dir);
  }
}

interface ReplaySetup {
  readonly metisPath: string;
  readonly specPath: string;
  readonly sessionId: string;
  readonly afterId: string;
  readonly replayCount: number;
  readonly label: string;
}

/** A database with its TraceStore; the §7.1 file has the same columns, so the same queries prepare. */
interface OpenStore {
  readonly db: Db;
  readonly store: TraceStore;
}

function openMetis(path: string): OpenStore {
  const db = openDatabase(path);
  return { db, store: new TraceStore(db) };
}

function openSpec(path: string): OpenStore {
  const db = openSpecLayoutDb(path);
  return { db, store: new TraceStore(db) };
}

/** One replay, timed until every frame is built: TraceStore.replayJson, then the frame per row. */
function timeReplay(store: TraceStore, setup: ReplaySetup): number {
  const start = performance.now();
  const result = store.replayJson({
    sessionIds: [setup.sessionId],
    afterId: setup.afterId,
    limit: REPLAY_CAP,
  });
  const frames = result.rows.map(([, json]) => `{"type":"event","event":${json}}`);
  const ms = performance.now() - start;
  if (frames.length !== setup.replayCount || result.tooLarge) {
    throw new Error(`replay returned ${frames.length} frames, expected ${setup.replayCount}`);
  }
  return ms;
}

function benchReplay(opts: SuiteOptions, setup: ReplaySetup): Figure[] {
  const warmRuns = opts.quick ? 5 : 15;
  const coldRuns = opts.quick ? 1 : 3;

  // Warm: both files open, one untimed replay each, then alternate.
  const metis = openMetis(setup.metisPath);
  const spec = openSpec(setup.specPath);
  const metisWarm: number[] = [];
  const specWarm: number[] = [];
  try {
    timeReplay(metis.store, setup);
    timeReplay(spec.store, setup);
    for (let i = 0; i < warmRuns; i += 1) {
      collectGarbage();
      metisWarm.push(timeReplay(metis.store, setup));
      collectGarbage();
      specWarm.push(timeReplay(spec.store, setup));
    }
  } finally {
    metis.db.close();
    spec.db.close();
  }

  // Cold: the first replay after reopening, with the file's pages dropped from the page cache first
  // (full runs only: dropping it slows every other process on the machine for a while).
  let coldLabel = 'cold';
  const metisCold: number[] = [];
  const specCold: number[] = [];
  const notes: string[] = [];
  for (let i = 0; i < coldRuns; i += 1) {
    for (const [path, open, out] of [
      [setup.metisPath, openMetis, metisCold],
      [setup.specPath, openSpec, specCold],
    ] as const) {
      let dropped = false;
      if (!opts.quick) {
        dropped = dropPageCache();
        if (!dropped) coldLabel = 'cold: page cache could not be dropped, first replay after reopen';
        const resident = residentBytes(path);
        if (resident !== null && i === 0) notes.push(`${path.split('/').pop()}: ${resident} bytes cached`);
      } else {
        coldLabel = 'first replay after reopen, page cache kept (quick)';
      }
      const { db, store } = open(path);
      try {
        collectGarbage();
        out.push(timeReplay(store, setup));
      } finally {
        db.close();
      }
    }
  }
  if (notes.length > 0) console.log(`  (after dropping the page cache: ${notes.join(', ')})`);

  return [
    figure({
      name: `replay ${setup.label}, warm`,
      value: median(metisWarm),
      unit: 'ms',
      baseline: { name: '§7.1 rowid layout, warm', value: median(specWarm) },
      target: { op: '<=', value: 30 },
    }),
    figure({
      name: `replay ${setup.label}, ${coldLabel}`,
      value: median(metisCold),
      unit: 'ms',
      baseline: { name: '§7.1 rowid layout, same', value: median(specCold) },
    }),
  ];
}

// 4. ------------------------------------------------------------------------------------------------

const WRITER = join(import.meta.dirname, 'lib', 'commit-writer.ts');

interface WriterReport {
  readonly samples: readonly (readonly [wallMs: number, latencyUs: number])[];
  readonly emitted: number;
  readonly committed: number;
  readonly dropped: number;
  readonly retries: number;
}

async function benchPrune(opts: SuiteOptions, dbPath: string, events: number): Promise<Figure[]> {
  const settleMs = opts.quick ? 500 : 1_000;
  const baselineMs = opts.quick ? 2_000 : 5_000;
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER, dbPath], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const report = collectWriterReport(child);
  try {
    await report.ready;
    await sleep(settleMs);
    const baselineStart = wallMs();
    await sleep(baselineMs);
    // The writer is judged while rows are being deleted: from the sweep's first progress report (after
    // its gap scan and its count of what to delete, which only read) to its end.
    const sweepStart = wallMs();
    let pruneStart = Number.NaN;
    const result = await purgeOldEvents({
      dbPath,
      days: 90,
      onProgress: () => {
        if (Number.isNaN(pruneStart)) pruneStart = wallMs();
      },
    });
    const pruneEnd = wallMs();
    await sleep(200);
    child.stdin?.end();
    const writer = await report.done;

    if (result.rows_deleted !== events) {
      throw new Error(`prune deleted ${result.rows_deleted} events, expected ${events}`);
    }
    const baseline = writer.samples
      .filter(([at]) => at >= baselineStart && at < sweepStart)
      .map(([, us]) => us / 1000)
      .sort((a, b) => a - b);
    const during = writer.samples
      .filter(([at]) => at >= pruneStart && at < pruneEnd)
      .map(([, us]) => us / 1000)
      .sort((a, b) => a - b);
    const failed = writer.dropped + (writer.emitted - writer.committed);
    console.log(
      `  (prune: ${result.rows_deleted.toLocaleString('en-US')} events in ${result.batches} batches, ` +
        `${((pruneEnd - sweepStart) / 1000).toFixed(1)} s, of which deleting ${((pruneEnd - pruneStart) / 1000).toFixed(1)} s; ` +
        `writer: ${during.length} commits while deleting, ` +
        `max ${formatMs(during[during.length - 1])} ms, ${writer.retries} busy retries, ${failed} failed writes)`,
    );
    const p99 = figure({
      name: `writer commit p99 while pruning ${events.toLocaleString('en-US')} events (${failed} failed writes)`,
      value: percentile(during, 99),
      unit: 'ms',
      baseline: { name: 'writer p99, no prune', value: percentile(baseline, 99) },
      target: { op: '<=', value: 50 },
    });
    return [failed > 0 ? { ...p99, pass: false } : p99];
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

/** Collects the writer's stdout: resolves `ready` on its first line, `done` with its report at exit. */
function collectWriterReport(child: ChildProcess): {
  ready: Promise<void>;
  done: Promise<WriterReport>;
} {
  let stdout = '';
  let stderr = '';
  let markReady: () => void = () => {};
  let failReady: (error: Error) => void = () => {};
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    failReady = reject;
  });
  child.stderr?.on('data', (chunk) => {
    stderr += String(chunk);
  });
  child.stdout?.on('data', (chunk) => {
    stdout += String(chunk);
    if (stdout.startsWith('ready\n')) markReady();
  });
  const done = new Promise<WriterReport>((resolve, reject) => {
    child.on('exit', (code, signal) => {
      const lines = stdout.split('\n');
      const last = lines.filter((l) => l.startsWith('done ')).pop();
      if (code !== 0 || last === undefined) {
        const error = new Error(`commit writer exited (code ${code}, signal ${signal}): ${stderr.trim()}`);
        failReady(error);
        reject(error);
        return;
      }
      const [emitted, committed, dropped, retries] = last.split(' ').slice(1).map(Number) as [
        number,
        number,
        number,
        number,
      ];
      const samples: [number, number][] = [];
      for (const line of lines) {
        if (line === '' || line === 'ready' || line.startsWith('done ')) continue;
        const [at, us] = line.split(' ').map(Number) as [number, number];
        samples.push([at, us]);
      }
      resolve({ samples, emitted, committed, dropped, retries });
    });
  });
  // Avoid an unhandled rejection when the child fails before anyone awaits `done`.
  done.catch(() => {});
  return { ready, done };
}

// ---------------------------------------------------------------------------------------------------

function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

function formatMs(ms: number | undefined): string {
  return ms === undefined ? '-' : ms.toFixed(1);
}
