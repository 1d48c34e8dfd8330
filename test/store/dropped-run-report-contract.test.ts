import { setTimeout as delay } from 'node:timers/promises';
import type pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { EmitInput, EventBus } from '../../src/core/bus/event-bus.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { turnCompleted, turnStarted } from '../helpers/events.js';
import { holdWriteLockInChild, type LockHolder } from '../helpers/lock-holder.js';
import { holdCopy, openPgWriter } from '../helpers/pg-store-writer.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * What a store writer dropped while its store was away is reported once the store is back (bus spec
 * §6.10): one `bus.gap_detected` per `seq` hole, in the hole's session, named by the persisted events
 * around it, with a `reported_gaps` row. SQLite's TraceWriter is the reference; PostgreSQL's
 * PgStoreWriter must report the same holes the same way for the same sequence of events.
 */

const server = postgresForFile();

/** The server's busy timeout on the loop (database.ts LOOP_BUSY_TIMEOUT_MS): a locked write fails at once. */
const LOOP_BUSY_TIMEOUT = 5;

/** A writer on a store that can be taken away and given back, read back with the same SQL on both. */
interface Subject {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  /** The store refuses writes from now on (a second process's lock; a stopped server). */
  away(): Promise<void>;
  back(): Promise<void>;
  all(sql: string): Promise<Record<string, unknown>[]>;
  flush(): Promise<void>;
}

const SUBJECTS: readonly {
  name: string;
  runs: boolean;
  open(maxEvents: number): Promise<Subject>;
}[] = [
  {
    name: 'SQLite (TraceWriter)',
    runs: true,
    open: async (maxEvents) => {
      const context = tempTraceContext({ writerBuffer: { maxEvents } });
      await context.flush();
      context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT}`);
      let lock: LockHolder | null = null;
      return {
        bus: context.bus,
        writer: context.writer,
        away: async () => {
          lock = await holdWriteLockInChild(context.dbPath, 60_000);
        },
        back: async () => lock?.release(),
        all: async (sql) => context.db.prepare(sql).all() as Record<string, unknown>[],
        flush: () => context.flush(),
      };
    },
  },
  {
    name: 'PostgreSQL (PgStoreWriter)',
    runs: postgresTestsRun,
    open: async (maxEvents) => pgSubject(await openPgWriter(server, { maxBufferedEvents: maxEvents })),
  },
];

function pgSubject(pgWriter: Awaited<ReturnType<typeof openPgWriter>>): Subject {
  return {
    bus: pgWriter.bus,
    writer: pgWriter.writer,
    away: () => server.stop('fast'),
    back: () => server.start(),
    all: async (sql) => (await pgWriter.pool.query(sql)).rows,
    flush: pgWriter.flush,
  };
}

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await delay(10);
  }
}

/** Emits events of the scenario, remembering each by a label (`a3`: the third event of sess_a). */
class Script {
  readonly labels = new Map<string, string>();
  readonly events = new Map<string, MetisEvent>();
  constructor(private readonly subject: Subject) {}

  emit(label: string, input: EmitInput): MetisEvent {
    const event = this.subject.bus.emit(input)!;
    this.labels.set(event.id, label);
    this.events.set(label, event);
    this.subject.bus.dispatchNow();
    return event;
  }

  started(label: string, sessionId: string): MetisEvent {
    return this.emit(label, turnStarted(sessionId, null, `turn_${label}`));
  }

  label(id: string, self: string): string {
    if (id === self) return 'self';
    return this.labels.get(id) ?? `unknown ${id}`;
  }
}

/** The store goes away; `trigger` meets it, and the writer is waiting it out (its buffer now bounded). */
async function goAway(subject: Subject, trigger: () => void): Promise<void> {
  await subject.away();
  trigger();
  await until(() => subject.writer.failure !== null);
}

/** The store comes back; everything waiting is committed and the report (on a later tick) is stored. */
async function comeBack(subject: Subject): Promise<void> {
  await subject.back();
  await subject.flush();
  await until(() => subject.writer.failure === null);
  await delay(100);
  await subject.flush();
}

interface StoredGap {
  readonly session: string;
  readonly start: string;
  readonly end: string;
  readonly missing: number;
  readonly seq: number;
}

/** Every stored `bus.gap_detected`, its ids as labels ('self': the report names itself as the end). */
async function storedGaps(subject: Subject, script: Script): Promise<StoredGap[]> {
  const rows = await subject.all(
    "SELECT id, session_id, seq, payload_json FROM events WHERE type = 'bus.gap_detected' ORDER BY session_id, seq",
  );
  return rows.map((row) => {
    const payload = JSON.parse(String(row.payload_json)) as Record<string, unknown>;
    const id = String(row.id);
    expect(payload.session_id).toBe(row.session_id);
    return {
      session: String(row.session_id),
      start: script.label(String(payload.gap_start_id), id),
      end: script.label(String(payload.gap_end_id), id),
      missing: Number(payload.estimated_missing_count),
      seq: Number(row.seq),
    };
  });
}

/** The `reported_gaps` rows, as labels, with the gap events they stand for. */
async function reportedRows(subject: Subject, script: Script): Promise<string[]> {
  const gapIds = new Map(
    (await subject.all("SELECT id FROM events WHERE type = 'bus.gap_detected'")).map((row) => [
      String(row.id),
      true,
    ]),
  );
  const rows = await subject.all(
    'SELECT session_id, gap_start_id, gap_end_id, missing_count FROM reported_gaps ORDER BY session_id, gap_start_id',
  );
  return rows
    .map((row) => {
      const end = String(row.gap_end_id);
      const endLabel = gapIds.has(end) ? 'a report' : script.label(end, '');
      return `${row.session_id} ${script.label(String(row.gap_start_id), '')} → ${endLabel} (${Number(row.missing_count)})`;
    })
    .sort();
}

for (const subject of SUBJECTS) {
  describe.runIf(subject.runs)(`dropped runs reported once the store is back: ${subject.name}`, () => {
    it('reports each hole once, in its session, named by the persisted events around it; never again', async () => {
      const s = await subject.open(4);
      const script = new Script(s);
      script.started('a1', 'sess_a');
      script.started('b1', 'sess_b');
      script.started('c1', 'sess_c');
      await s.flush();

      await goAway(s, () => script.started('a2', 'sess_a'));
      // The buffer holds 4 events: a2 and these three.
      script.started('b2', 'sess_b');
      script.started('a3', 'sess_a');
      script.started('b3', 'sess_b');
      // Past the bound: a4 and a5 dropped, a6 (an ending) kept, which closes sess_a's first run.
      script.started('a4', 'sess_a');
      script.started('a5', 'sess_a');
      script.emit('a6', turnCompleted('sess_a', null, 'turn_a6'));
      for (const label of ['b4', 'b5', 'b6']) script.started(label, 'sess_b');
      script.started('a7', 'sess_a');
      expect(s.writer.stats.droppedEvents).toBe(6);
      await comeBack(s);

      const stored = await s.all("SELECT id FROM events WHERE session_id <> 'system' ORDER BY id");
      expect(
        stored.map((row) => script.label(String(row.id), '')).filter((l) => !l.startsWith('unknown')),
      ).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'b3', 'a6']);
      // A run with nothing stored after it names the report itself, which is then its session's next
      // event: sess_a's open run is reported (seq 8) before its closed one (seq 9).
      const expected: StoredGap[] = [
        { session: 'sess_a', start: 'a6', end: 'self', missing: 1, seq: 8 },
        { session: 'sess_a', start: 'a3', end: 'a6', missing: 2, seq: 9 },
        { session: 'sess_b', start: 'b3', end: 'self', missing: 3, seq: 7 },
      ];
      expect(await storedGaps(s, script)).toEqual(expected);
      expect(await reportedRows(s, script)).toEqual([
        'sess_a a3 → a6 (2)',
        'sess_a a6 → a report (1)',
        'sess_b b3 → a report (3)',
      ]);

      // A second outage dropping only sess_c's events: the earlier holes are not reported again.
      await goAway(s, () => script.started('a8', 'sess_a'));
      for (const label of ['a9', 'a10', 'a11']) script.started(label, 'sess_a');
      script.started('c2', 'sess_c');
      script.started('c3', 'sess_c');
      expect(s.writer.stats.droppedEvents).toBe(8);
      await comeBack(s);
      expect(await storedGaps(s, script)).toEqual([
        ...expected,
        { session: 'sess_c', start: 'c1', end: 'self', missing: 2, seq: 4 },
      ]);
      expect(await reportedRows(s, script)).toHaveLength(4);
    }, 60_000);
  });
}

/**
 * `real`, except that once armed, the answer of the next read of a run's bounds is held until released:
 * the store has answered "nothing after the run", and the session may emit before the report is made.
 */
function holdBoundsAnswer(real: pg.Pool): { pool: pg.Pool; arm(): void; held(): boolean; release(): void } {
  let armed = false;
  let held = false;
  let release = () => {};
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const query = real.query.bind(real) as (...args: unknown[]) => Promise<unknown>;
  const pool = {
    query: (...args: unknown[]) => {
      const text = (args[0] as { text?: string }).text ?? '';
      if (!armed || !text.includes('AS after')) return query(...args);
      armed = false;
      return query(...args).then(async (answer) => {
        held = true;
        await gate;
        return answer;
      });
    },
    connect: real.connect.bind(real),
    on: real.on.bind(real),
  } as unknown as pg.Pool;
  return { pool, arm: () => (armed = true), held: () => held, release };
}

describe.runIf(postgresTestsRun)('dropped runs reported over PostgreSQL while the session goes on', () => {
  it('ends the gap at the session’s first event stored after the read, not at the report', async () => {
    const url = freshDatabase(server);
    const real = postgresPool(url, 'serve', 4);
    onTestFinished(() => real.end());
    const link = holdBoundsAnswer(real);
    const pgWriter = await openPgWriter(server, { url, pool: link.pool, maxBufferedEvents: 2 });
    const s = pgSubject(pgWriter);
    const script = new Script(s);
    script.started('b1', 'sess_b');
    await s.flush();
    await goAway(s, () => script.started('x1', 'sess_x'));
    script.started('x2', 'sess_x');
    script.started('b2', 'sess_b');
    script.started('b3', 'sess_b');
    expect(s.writer.stats.droppedEvents).toBe(2);
    link.arm();
    await s.back();
    await until(link.held);
    // The read said nothing of sess_b follows the run; b4 is stored before the report is made.
    const b4 = script.started('b4', 'sess_b');
    await s.writer.whenCommitted(b4.id, 5_000);
    link.release();
    await delay(100);
    await s.flush();
    expect(await storedGaps(s, script)).toEqual([
      { session: 'sess_b', start: 'b1', end: 'b4', missing: 2, seq: 5 },
    ]);
    expect(await reportedRows(s, script)).toEqual(['sess_b b1 → b4 (2)']);
  }, 30_000);

  it('reports a run and the run dropped right after it, while it was read, as one hole', async () => {
    const url = freshDatabase(server);
    const real = postgresPool(url, 'serve', 4);
    onTestFinished(() => real.end());
    const link = holdBoundsAnswer(real);
    const s = pgSubject(await openPgWriter(server, { url, pool: link.pool, maxBufferedEvents: 2 }));
    const script = new Script(s);
    script.started('b1', 'sess_b');
    await s.flush();
    await goAway(s, () => script.started('x1', 'sess_x'));
    script.started('x2', 'sess_x');
    script.started('b2', 'sess_b');
    script.started('b3', 'sess_b');
    link.arm();
    await s.back();
    await until(link.held);
    // While the report reads, the store goes away again and sess_b's next event is dropped too, then
    // it is back: b2 to b4 are one seq hole, which the report must not split at b4.
    await goAway(s, () => script.started('x3', 'sess_x'));
    script.started('x4', 'sess_x');
    script.started('b4', 'sess_b');
    expect(s.writer.stats.droppedEvents).toBe(3);
    await s.back();
    await s.flush();
    await until(() => s.writer.failure === null);
    link.release();
    await delay(100);
    await s.flush();
    expect(await storedGaps(s, script)).toEqual([
      { session: 'sess_b', start: 'b1', end: 'self', missing: 3, seq: 5 },
    ]);
    expect(await reportedRows(s, script)).toEqual(['sess_b b1 → a report (3)']);
  }, 30_000);

  it('reads the store only once what was queued before the report is committed', async () => {
    const url = freshDatabase(server);
    const real = postgresPool(url, 'serve', 4);
    onTestFinished(() => real.end());
    const link = holdCopy(real);
    onTestFinished(() => link.release());
    const s = pgSubject(await openPgWriter(server, { url, pool: link.pool, maxBufferedEvents: 2 }));
    const script = new Script(s);
    script.started('b1', 'sess_b');
    await s.flush();
    await goAway(s, () => script.started('x1', 'sess_x'));
    const x2 = script.started('x2', 'sess_x');
    script.started('b2', 'sess_b');
    script.started('b3', 'sess_b');
    // Once the backlog's last batch commits, b4 is queued before the report's turn; its commit is held.
    const stop = s.writer.onCommit((batch) => {
      if (!batch.some((event) => event.id === x2.id)) return;
      stop();
      link.arm();
      setImmediate(() => script.started('b4', 'sess_b'));
    });
    await s.back();
    await until(link.held);
    await delay(100);
    link.release();
    await delay(100);
    await s.flush();
    expect(await storedGaps(s, script)).toEqual([
      { session: 'sess_b', start: 'b1', end: 'b4', missing: 2, seq: 5 },
    ]);
  }, 30_000);
});
