import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { EmitInput } from '../../src/core/bus/event-bus.js';
import type { MetisError } from '../../src/core/errors.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import { postgresClient, postgresPool } from '../../src/core/store/postgres/connect.js';
import { redactUrl } from '../../src/core/store/store-copy.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import {
  holdCopy,
  isBatchSubmission,
  openPgWriter,
  poolQueryingThrough,
} from '../helpers/pg-store-writer.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { ROW_TABLES, RowStores } from '../helpers/row-applier-stores.js';
import { randomChangeSequences } from '../helpers/row-change-arbitrary.js';
import { session } from '../helpers/row-change-builders.js';
import { message, recorded, spend } from '../helpers/writer-rows.js';

/**
 * What PgStoreWriter does that SQLite's writer has no need to (store-writer-contract.test.ts holds the
 * two to one contract): wait out a server that goes away, settle a COMMIT whose answer was lost from
 * its commit mark, fence the families of leases this node no longer holds, number `system` events in
 * the store.
 */

const server = postgresForFile();

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * `real`, except that once armed, the next COMMIT is handed to `armed` (which sends it when it likes
 * and answers what it likes): a link that loses the answer, or a commit frozen in flight. A COMMIT
 * sent at the end of a batch's one query (pg-batch-query.ts) is that whole query.
 */
function interceptCommit(
  real: pg.Pool,
  armed: (commit: () => Promise<unknown>) => Promise<unknown>,
): { pool: pg.Pool; arm(): void } {
  let next = false;
  const pool = poolQueryingThrough(real, (query, text, rest) => {
    const batch = isBatchSubmission(text) && /;\s*COMMIT$/.test(text.text) ? text : null;
    if ((text !== 'COMMIT' && batch === null) || !next) return query(text, ...rest);
    next = false;
    if (batch === null) return armed(() => query(text, ...rest));
    const answer = batch.callback.bind(batch);
    const sent = () =>
      new Promise((resolve, reject) => {
        batch.callback = (error) => (error === null ? resolve(undefined) : reject(error));
        query(batch);
      });
    armed(sent).then(
      () => answer(null),
      (error: Error) => answer(error),
    );
    // As pg's own client.query(submittable) answers: the query object itself.
    return batch;
  });
  return { pool, arm: () => (next = true) };
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
    let lost = 0;
    const link = interceptCommit(real, (commit) =>
      commit().then(() => {
        lost += 1;
        throw new Error('Connection terminated unexpectedly (test: the answer to COMMIT is lost)');
      }),
    );
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
    expect(lost).toBe(1);
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
      // A lease this node believes it holds and the store has no row of (released, swept).
      sess_d: { root: 'fam_d', token: 5 },
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
    for (const id of ['sess_a', 'sess_b', 'sess_c', 'sess_d', 'sess_free']) {
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
    expect(outcomes[3]).toMatch(/^METIS_ERR_SESSION_ELSEWHERE: session sess_d .*no node holds its lease now/);
    expect(outcomes[4]).toBe('committed');
    expect(dropped.map((event) => event.session_id)).toEqual(['sess_b', 'sess_c', 'sess_d']);
    expect(fenced).toEqual([['fam_b', 'fam_c', 'fam_d']]);
    expect(settled.filter((entry) => entry.endsWith(':false')).sort()).toEqual([
      'msg:sess_b:false',
      'msg:sess_c:false',
      'msg:sess_d:false',
      'session:sess_b:false',
      'session:sess_c:false',
      'session:sess_d:false',
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

  it('bounds what waits while the store is away as SQLite does: past the bound only endings are kept', async () => {
    const { bus, writer, pool, flush } = await openPgWriter(server, { maxBufferedEvents: 4 });
    await flush();
    const dropped: MetisEvent[] = [];
    writer.onDrop((events) => dropped.push(...events));
    await server.stop('fast');
    const emitted: MetisEvent[] = [];
    let ended: MetisEvent;
    let refusals: PromiseSettledResult<void>[];
    try {
      const started = bus.emit(turnStarted('sess_a'))!;
      bus.dispatchNow();
      await until(() => writer.failure !== null);
      for (let i = 0; i < 6; i += 1) emitted.push(bus.emit(turnStarted('sess_a', null, `turn_${i + 2}`))!);
      ended = bus.emit(turnCompleted('sess_a', started.id))!;
      bus.dispatchNow();
      refusals = await Promise.allSettled(emitted.slice(3).map((event) => writer.whenCommitted(event.id)));
      // The first event waits in the batch being retried; three more fit the bound of four.
      expect(writer.buffered.events).toBe(5);
      emitted.unshift(started);
    } finally {
      await server.start();
    }
    await flush();
    expect(dropped.map((event) => event.id)).toEqual(emitted.slice(4).map((event) => event.id));
    expect(refusals.map((result) => (result.status === 'rejected' ? result.reason.code : 'stored'))).toEqual([
      'METIS_ERR_STORE_UNAVAILABLE',
      'METIS_ERR_STORE_UNAVAILABLE',
      'METIS_ERR_STORE_UNAVAILABLE',
    ]);
    const stored = await pool.query(
      "SELECT id FROM events WHERE session_id = 'sess_a' AND type <> 'bus.gap_detected' ORDER BY id",
    );
    expect(stored.rows.map((row) => row.id)).toEqual(
      [...emitted.slice(0, 4), ended].map((event) => event.id),
    );
    // The dropped run, closed by the kept ending, is reported as TraceWriter reports it (a later tick).
    await new Promise((resolve) => setTimeout(resolve, 100));
    await flush();
    const gaps = await pool.query("SELECT payload_json FROM events WHERE type = 'bus.gap_detected'");
    expect(gaps.rows.map((row) => JSON.parse(row.payload_json))).toEqual([
      expect.objectContaining({
        session_id: 'sess_a',
        gap_start_id: emitted[3]!.id,
        gap_end_id: ended.id,
        estimated_missing_count: 3,
      }),
    ]);
  });

  it('holds its own lease rows FOR SHARE until COMMIT: a take-over waits for the commit in flight', async () => {
    const url = freshDatabase(server);
    const real = postgresPool(url, 'serve', 2);
    onTestFinished(() => real.end());
    const link = holdCopy(real);
    const { bus, writer, pool, flush } = await openPgWriter(server, {
      url,
      pool: link.pool,
      fence: { nodeId: 'node-a', leaseOf: (id) => (id === 'sess_a' ? { root: 'sess_a', token: 7 } : null) },
    });
    onTestFinished(() => link.release()); // a failed assertion must not leave the commit (and the writer) hanging
    await pool.query(
      "INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us, token) VALUES ('sess_a', 'node-a', 1, 7)",
    );
    const taker = postgresClient(url, 'serve');
    await taker.connect();
    onTestFinished(() => taker.end());
    await taker.query("SET lock_timeout = '300ms'");
    const takeOver = async () =>
      (
        await taker.query(
          `UPDATE metis_session_leases SET node_id = 'node-b', token = nextval('metis_lease_tokens')
            WHERE session_id = 'sess_a' RETURNING node_id`,
        )
      ).rows;
    await flush(); // the bus's own first event: its commit is not the one held
    link.arm();
    const first = bus.emit(sessionCreated('sess_a'))!;
    bus.dispatchNow();
    await until(link.held);
    await expect(takeOver()).rejects.toMatchObject({ code: '55P03' });
    link.release();
    await expect(writer.whenCommitted(first.id, 5_000)).resolves.toBeUndefined();
    expect(await takeOver()).toEqual([{ node_id: 'node-b' }]);
    // The next write of the family is fenced: the lease is node-b's now.
    const late = bus.emit(turnStarted('sess_a'))!;
    await expect(writer.whenCommitted(late.id, 5_000)).rejects.toMatchObject({
      code: 'METIS_ERR_SESSION_ELSEWHERE',
    });
    await flush();
  });

  it('writes random sequences of row changes as applyRowChanges does with parameters', async () => {
    // The writer sends its rows as literals in the round trip of BEGIN: every kind, every value shape.
    const stores = new RowStores(() => freshDatabase(server));
    onTestFinished(() => stores.close());
    const { writer, pool } = await openPgWriter(server);
    await fc.assert(
      fc.asyncProperty(randomChangeSequences(), async ({ setup, changes }) => {
        const expected = await stores.onPostgres(setup, changes);
        await pool.query(`TRUNCATE ${Object.keys(ROW_TABLES).join(', ')} RESTART IDENTITY CASCADE`);
        for (const sql of setup) await pool.query(sql);
        const settled: boolean[] = [];
        for (const change of changes)
          writer.writeRow({ what: change.kind, change, settled: (ok) => settled.push(ok) });
        expect(await writer.idle(10_000)).toBe(true);
        expect(settled).toEqual(changes.map(() => true));
        const tables: Record<string, unknown[]> = {};
        for (const [table, sql] of Object.entries(ROW_TABLES)) tables[table] = (await pool.query(sql)).rows;
        expect(tables).toEqual(expected.tables);
      }),
      { numRuns: 40 },
    );
  }, 180_000);
});
