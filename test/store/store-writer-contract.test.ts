import type pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { EmitInput, EventBus } from '../../src/core/bus/event-bus.js';
import type { MetisError } from '../../src/core/errors.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import type { RowWrite } from '../../src/core/store/batch-committer.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { redactUrl } from '../../src/core/store/store-copy.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session, toolCall, toolCallUpdate } from '../helpers/row-change-builders.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * The StoreWriter contract, held by both writers: SQLite's TraceWriter and PostgreSQL's PgStoreWriter
 * (docs/plans/store-port.md step 7). What the floors above the store observe must not depend on the
 * store: events and rows stored in queue order, acknowledgements after commit, listeners in order,
 * a refused row left out alone. Then PostgreSQL's own cases: outage, lost answer, fence, system seq.
 */

const server = postgresForFile();

/** A writer on a store, with its bus and a way to read the store back. */
interface Subject {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  /** Runs `sql` (no parameters) on the store; the same SQL reads both stores. */
  all(sql: string): Promise<Record<string, unknown>[]>;
  /** Waits until everything emitted is dispatched and committed. */
  flush(): Promise<void>;
}

const WRITERS: readonly { name: string; runs: boolean; open(): Promise<Subject> }[] = [
  {
    name: 'SQLite (TraceWriter)',
    runs: true,
    open: async () => {
      const context = tempTraceContext();
      return {
        bus: context.bus,
        writer: context.writer,
        all: async (sql) => context.db.prepare(sql).all() as Record<string, unknown>[],
        flush: () => context.flush(),
      };
    },
  },
  {
    name: 'PostgreSQL (PgStoreWriter)',
    runs: postgresTestsRun,
    open: async () => {
      const pg = await openPgWriter(server);
      return {
        bus: pg.bus,
        writer: pg.writer,
        all: async (sql) => (await pg.pool.query(sql)).rows,
        flush: pg.flush,
      };
    },
  },
];

/** A row write that records how it settled. */
function recorded(change: RowChange, log: string[], name: string = change.kind): RowWrite {
  return { what: name, change, settled: (committed) => log.push(`${name}:${committed}`) };
}

function message(id: string, sessionId: string, role: string, content: string): RowChange {
  return {
    kind: 'message.upsert',
    id,
    sessionId,
    turnId: 'turn_1',
    role,
    contentJson: JSON.stringify(content),
    status: 'complete',
    model: null,
    usageJson: null,
    createdAtUs: 1,
  };
}

for (const subject of WRITERS) {
  describe.runIf(subject.runs)(`store writer contract: ${subject.name}`, () => {
    it('stores events and rows in queue order: seq per session, the later row change wins', async () => {
      const { bus, writer, all, flush } = await subject.open();
      const settled: string[] = [];
      const emitted: MetisEvent[] = [];
      emitted.push(bus.emit(sessionCreated('sess_a'))!, bus.emit(sessionCreated('sess_b'))!);
      writer.writeRow(recorded(session('sess_a', 1), settled));
      const started = bus.emit(turnStarted('sess_a'))!;
      emitted.push(started, bus.emit(turnStarted('sess_b'))!);
      writer.writeRow(recorded(message('msg_1', 'sess_a', 'user', 'first'), settled, 'msg:first'));
      writer.writeRow(recorded(toolCall('call_1', 'running'), settled));
      writer.writeRow(recorded(toolCallUpdate('call_1', 'completed'), settled));
      await flush();
      // A later tick: the same message saved again, and the turn's end.
      writer.writeRow(recorded(message('msg_1', 'sess_a', 'user', 'second'), settled, 'msg:second'));
      emitted.push(bus.emit(turnCompleted('sess_a', started.id))!);
      await flush();

      const stored = await all('SELECT id, session_id, seq FROM events ORDER BY id');
      const ours = stored.filter((row) => row.session_id !== 'system');
      expect(ours.map((row) => row.id)).toEqual(emitted.map((event) => event.id));
      expect(ours.filter((row) => row.session_id === 'sess_a').map((row) => Number(row.seq))).toEqual([
        1, 2, 3,
      ]);
      expect(ours.filter((row) => row.session_id === 'sess_b').map((row) => Number(row.seq))).toEqual([1, 2]);
      expect(await all("SELECT content_json FROM messages WHERE id = 'msg_1'")).toEqual([
        { content_json: '"second"' },
      ]);
      expect(await all("SELECT status FROM tool_calls WHERE id = 'call_1'")).toEqual([
        { status: 'completed' },
      ]);
      expect(await all("SELECT workspace_path FROM sessions WHERE id = 'sess_a'")).toEqual([
        { workspace_path: '/ws/sess_a' },
      ]);
      // sess_b has events and no session.create: the writer gave it a bare row, as SQLite's does.
      expect(await all("SELECT id FROM sessions WHERE id = 'sess_b'")).toEqual([{ id: 'sess_b' }]);
      expect(settled).toEqual([
        'session.create:true',
        'msg:first:true',
        'toolCall.insert:true',
        'toolCall.update:true',
        'msg:second:true',
      ]);
      expect(writer.buffered).toEqual({ events: 0, bytes: 0, items: 0 });
    });

    it('tells onCommit listeners each batch once committed, in emit order, and resolves waiters then', async () => {
      const { bus, writer, all, flush } = await subject.open();
      await flush();
      const batches: string[][] = [];
      const storedWhenTold: boolean[] = [];
      const stop = writer.onCommit((batch) => {
        batches.push(batch.map((event) => event.id));
      });
      const reports: string[] = [];
      writer.onBatch((report) => reports.push(`${report.outcome}:${report.events.length}`));
      const ids: string[] = [];
      for (let tick = 0; tick < 3; tick += 1) {
        for (let i = 0; i < 40; i += 1) ids.push(bus.emit(turnStarted(`sess_${i % 4}`))!.id);
        bus.dispatchNow();
      }
      const last = ids.at(-1)!;
      const acknowledged = writer.whenCommitted(last, 10_000).then(async () => {
        const rows = await all(`SELECT count(*) AS n FROM events WHERE id = '${last}'`);
        storedWhenTold.push(Number(rows[0]!.n) === 1);
      });
      await acknowledged;
      await flush();
      expect(batches.flat()).toEqual(ids);
      expect(storedWhenTold).toEqual([true]);
      expect(reports.every((report) => report.startsWith('committed:'))).toBe(true);
      // An id committed long ago resolves at once.
      await expect(writer.whenCommitted(ids[0]!, 100)).resolves.toBeUndefined();
      stop();
      bus.emit(turnStarted('sess_after'));
      await flush();
      expect(batches.flat()).toHaveLength(ids.length);
    });

    it('rejects a waiter after its timeout with the writer’s storage refusal, and is idle once drained', async () => {
      const { bus, writer, flush } = await subject.open();
      const refused = await writer.whenCommitted('evt_never_emitted', 50).then(
        () => null,
        (error: unknown) => error as { code: string },
      );
      expect(refused?.code).toBe(writer.storageRefusal().code);
      for (let i = 0; i < 100; i += 1) bus.emit(turnStarted('sess_idle'));
      bus.dispatchNow();
      // SQLite has committed already (synchronously); PostgreSQL is under way: both are idle once drained.
      expect(await writer.idle(10_000)).toBe(true);
      expect(writer.buffered).toEqual({ events: 0, bytes: 0, items: 0 });
      await flush();
      expect(writer.failure).toBeNull();
      expect(await writer.idle(1)).toBe(true);
    });

    it('refuses a row that breaks a constraint alone: logged, settled false, the rest of its batch committed', async () => {
      const { bus, writer, all, flush } = await subject.open();
      const settled: string[] = [];
      const dropped: MetisEvent[] = [];
      writer.onDrop((events) => dropped.push(...events));
      const before = writer.stats.rejectedRows;
      writer.writeRow(recorded(session('sess_a', 1), settled));
      const first = bus.emit(turnStarted('sess_a'))!;
      writer.writeRow(recorded(message('msg_good', 'sess_a', 'user', 'ok'), settled, 'msg:good'));
      writer.writeRow(recorded(message('msg_bad', 'sess_a', 'narrator', 'no such role'), settled, 'msg:bad'));
      const second = bus.emit(turnStarted('sess_a', null, 'turn_2'))!;
      writer.writeRow(recorded(message('msg_after', 'sess_a', 'assistant', 'ok'), settled, 'msg:after'));
      await flush();
      await expect(writer.whenCommitted(second.id, 5_000)).resolves.toBeUndefined();
      expect(settled).toEqual(['session.create:true', 'msg:good:true', 'msg:bad:false', 'msg:after:true']);
      expect(writer.stats.rejectedRows - before).toBe(1);
      expect(dropped).toEqual([]);
      expect((await all('SELECT id FROM messages ORDER BY id')).map((row) => row.id)).toEqual([
        'msg_after',
        'msg_good',
      ]);
      const events = await all("SELECT id FROM events WHERE session_id = 'sess_a' ORDER BY id");
      expect(events.map((row) => row.id)).toEqual([first.id, second.id]);
    });
  });
}

function spend(sessionId: string, usd: number): RowWrite {
  return { what: 'spend', change: { kind: 'budget.spend', sessionId, usd, tokens: 10 } };
}

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** `real`, except that once armed, the next COMMIT goes through and its answer is lost (a dropped link). */
function losingCommitAnswer(real: pg.Pool): { pool: pg.Pool; arm(): void; lost(): number } {
  let armed = false;
  let lost = 0;
  const pool = {
    query: real.query.bind(real),
    on: real.on.bind(real),
    connect: async () => {
      const client = await real.connect();
      const query = client.query.bind(client) as (text: unknown, ...rest: unknown[]) => Promise<unknown>;
      (client as unknown as { query: typeof query }).query = (text, ...rest) => {
        if (text !== 'COMMIT' || !armed) return query(text, ...rest);
        armed = false;
        return query(text, ...rest).then(() => {
          lost += 1;
          throw new Error('Connection terminated unexpectedly (test: the answer to COMMIT is lost)');
        });
      };
      return client;
    },
  } as unknown as pg.Pool;
  return { pool, arm: () => (armed = true), lost: () => lost };
}

function systemEvent(name: string): EmitInput {
  return {
    type: 'bus.subscriber_registered',
    session_id: SYSTEM_SESSION_ID,
    payload: { subscription_name: name, filter: {}, fast_path: false },
  };
}

describe.runIf(postgresTestsRun)('PgStoreWriter: what only a store across the network does', () => {
  it('waits out a server restart, refusing by the store’s name meanwhile, then stores everything once, in order', async () => {
    const { url, bus, writer, all, flush } = await openPgWriter(server).then((pg) => ({
      ...pg,
      all: async (sql: string) => (await pg.pool.query(sql)).rows as Record<string, unknown>[],
    }));
    writer.writeRow(spend('sess_a', 0.5));
    const emitted: MetisEvent[] = [bus.emit(sessionCreated('sess_a'))!];
    writer.writeRow({ what: 'session', change: session('sess_a', 1) });
    writer.writeRow(spend('sess_a', 0.5));
    await flush();
    await server.stop('fast');
    try {
      for (let tick = 0; tick < 5; tick += 1) {
        emitted.push(bus.emit(turnStarted('sess_a'))!, bus.emit(turnStarted('sess_b'))!);
        writer.writeRow(spend('sess_a', 0.25));
        bus.dispatchNow();
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await until(() => writer.failure !== null);
      const refusal = writer.storageRefusal();
      expect(refusal.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
      expect(refusal.message).toContain(`the PostgreSQL store ${redactUrl(url)} is unreachable`);
      await expect(writer.whenCommitted(emitted.at(-1)!.id, 50)).rejects.toMatchObject({
        code: 'METIS_ERR_STORE_UNAVAILABLE',
      });
      expect(writer.buffered.events).toBeGreaterThan(0);
    } finally {
      await server.start();
    }
    await flush();
    await expect(writer.whenCommitted(emitted.at(-1)!.id, 1_000)).resolves.toBeUndefined();
    expect(writer.failure).toBeNull();
    expect(writer.stats.retries).toBeGreaterThan(0);
    const stored = await all(
      "SELECT id, session_id, seq FROM events WHERE session_id <> 'system' ORDER BY id",
    );
    expect(stored.map((row) => row.id)).toEqual(emitted.map((event) => event.id));
    const seqs = (id: string) => stored.filter((row) => row.session_id === id).map((row) => Number(row.seq));
    expect(seqs('sess_a')).toEqual([1, 2, 3, 4, 5, 6]);
    expect(seqs('sess_b')).toEqual([1, 2, 3, 4, 5]);
    // The spend before the session's row found nothing to add to, as in SQLite; then 0.5 + 5 × 0.25.
    expect(await all("SELECT spent_usd FROM sessions WHERE id = 'sess_a'")).toEqual([{ spent_usd: 1.75 }]);
  });

  it('settles a batch whose COMMIT answer was lost from the commit mark, never writing it twice', async () => {
    const url = freshDatabase(server);
    const real = postgresPool(url, 'serve', 2);
    onTestFinished(() => real.end());
    const link = losingCommitAnswer(real);
    const logs = captureLogs();
    const { bus, writer, pool, flush } = await openPgWriter(server, {
      url,
      pool: link.pool,
      logger: logs.logger,
    });
    writer.writeRow({ what: 'session', change: session('sess_a', 1) });
    writer.writeRow(spend('sess_a', 1));
    bus.emit(sessionCreated('sess_a'));
    await flush();
    link.arm();
    const started = bus.emit(turnStarted('sess_a'))!;
    writer.writeRow(spend('sess_a', 0.5));
    const dropped: MetisEvent[] = [];
    writer.onDrop((events) => dropped.push(...events));
    await expect(writer.whenCommitted(started.id, 10_000)).resolves.toBeUndefined();
    await flush();
    expect(link.lost()).toBe(1);
    expect(writer.stats.retries).toBe(1);
    expect(dropped).toEqual([]);
    expect(writer.stats.rejectedRows).toBe(0);
    expect((await pool.query("SELECT spent_usd FROM sessions WHERE id = 'sess_a'")).rows).toEqual([
      { spent_usd: 1.5 },
    ]);
    expect(
      (await pool.query(`SELECT count(*)::int AS n FROM events WHERE id = '${started.id}'`)).rows,
    ).toEqual([{ n: 1 }]);
    await settleLogs();
    expect(logs.at(LEVEL.warn).some((record) => record.msg.includes('had gone through'))).toBe(true);
  });

  it('leaves out the families whose lease is another node’s or another token’s; the rest commits', async () => {
    const fenced: string[][] = [];
    const leases: Record<string, { root: string; token: number }> = {
      sess_a: { root: 'fam_a', token: 101 },
      sess_b: { root: 'fam_b', token: 102 },
      sess_c: { root: 'fam_c', token: 99 },
    };
    const { bus, writer, pool, flush } = await openPgWriter(server, {
      writerId: 'node-a',
      fence: {
        nodeId: 'node-a',
        leaseOf: (id) => leases[id] ?? null,
        onFenced: (roots) => fenced.push([...roots].sort()),
      },
    });
    await pool.query(
      `INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us, token)
       VALUES ('fam_a', 'node-a', 1, 101), ('fam_b', 'node-b', 1, 102), ('fam_c', 'node-a', 1, 103)`,
    );
    const settled: string[] = [];
    const dropped: MetisEvent[] = [];
    writer.onDrop((events) => dropped.push(...events));
    const events = new Map<string, MetisEvent>();
    for (const id of ['sess_a', 'sess_b', 'sess_c', 'sess_free']) {
      writer.writeRow(recorded(session(id, 1), settled, `session:${id}`));
      events.set(id, bus.emit(sessionCreated(id))!);
      writer.writeRow(recorded(message(`msg_${id}`, id, 'user', 'hi'), settled, `msg:${id}`));
    }
    const outcomes = await Promise.all(
      [...events.values()].map((event) =>
        writer.whenCommitted(event.id, 10_000).then(
          () => 'committed',
          (error: MetisError) => `${error.code}: ${error.message}`,
        ),
      ),
    );
    await flush();
    expect(outcomes[0]).toBe('committed');
    expect(outcomes[1]).toMatch(/^METIS_ERR_SESSION_ELSEWHERE: session sess_b runs elsewhere.*node node-b/);
    expect(outcomes[2]).toMatch(/^METIS_ERR_SESSION_ELSEWHERE: session sess_c runs elsewhere/);
    expect(outcomes[3]).toBe('committed');
    expect(dropped.map((event) => event.session_id)).toEqual(['sess_b', 'sess_c']);
    expect(fenced).toEqual([['fam_b', 'fam_c']]);
    expect(settled.filter((entry) => entry.endsWith(':false')).sort()).toEqual([
      'msg:sess_b:false',
      'msg:sess_c:false',
      'session:sess_b:false',
      'session:sess_c:false',
    ]);
    const rows = async (sql: string) => (await pool.query(sql)).rows.map((row) => Object.values(row)[0]);
    expect(
      await rows("SELECT session_id FROM events WHERE session_id <> 'system' ORDER BY session_id"),
    ).toEqual(['sess_a', 'sess_free']);
    expect(await rows("SELECT id FROM sessions WHERE id <> 'system' ORDER BY id")).toEqual([
      'sess_a',
      'sess_free',
    ]);
    expect(await rows('SELECT session_id FROM messages ORDER BY session_id')).toEqual([
      'sess_a',
      'sess_free',
    ]);
  });

  it('numbers the system session’s events in the store: two writers at once give out no seq twice', async () => {
    const first = await openPgWriter(server, { numberSystemEvents: true });
    const second = await openPgWriter(server, { url: first.url, numberSystemEvents: true });
    // Each bus told its store of the writer's own subscription first: seq 1 and 2.
    await Promise.all([first.flush(), second.flush()]);
    const told: number[] = [];
    for (const { writer } of [first, second])
      writer.onCommit((batch) => told.push(...batch.map((e) => e.seq!)));
    for (let round = 0; round < 10; round += 1) {
      for (const [n, { bus }] of [first, second].entries()) {
        for (let i = 0; i < 5; i += 1) bus.emit(systemEvent(`w${n}-${round}-${i}`));
        bus.dispatchNow();
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all([first.flush(), second.flush()]);
    const seqs = (await first.pool.query("SELECT seq FROM events WHERE session_id = 'system' ORDER BY seq"))
      .rows;
    const expected = Array.from({ length: 102 }, (_, i) => i + 1);
    expect(seqs.map((row) => Number(row.seq))).toEqual(expected);
    // What the listeners were told is what is stored.
    expect(told.sort((a, b) => a - b)).toEqual(expected.slice(2));
  });

  it('refuses an event the store already holds under its id alone, with an ERROR log; the rest commits', async () => {
    const logs = captureLogs();
    const { bus, writer, pool, flush } = await openPgWriter(server, { logger: logs.logger });
    const first = bus.emit(sessionCreated('sess_a'))!;
    await flush();
    const dropped: MetisEvent[] = [];
    writer.onDrop((events) => dropped.push(...events));
    const before = bus.emit(turnStarted('sess_a'))!;
    bus.dispatchNow();
    writer.write([first]);
    const after = bus.emit(turnStarted('sess_a', null, 'turn_2'))!;
    await flush();
    await expect(writer.whenCommitted(after.id, 1_000)).resolves.toBeUndefined();
    expect(dropped).toEqual([first]);
    expect(writer.stats.rejectedRows).toBe(1);
    const ids = (await pool.query("SELECT id FROM events WHERE session_id <> 'system' ORDER BY id")).rows.map(
      (row) => row.id,
    );
    expect(ids).toEqual([first.id, before.id, after.id]);
    await settleLogs();
    expect(logs.at(LEVEL.error)).toHaveLength(1);
    expect(logs.at(LEVEL.error)[0]!.row).toMatchObject({ event_id: first.id });
  });
});
