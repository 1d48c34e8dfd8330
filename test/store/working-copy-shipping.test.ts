import { existsSync } from 'node:fs';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { openDatabase } from '../../src/core/store/database.js';
import { SqlitePatternRows } from '../../src/core/store/pattern-rows.js';
import { PgShipper } from '../../src/core/store/postgres/pg-shipper.js';
import { openPostgresStore } from '../../src/core/store/postgres/serve-store.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * The working copy's shipper (src/core/store/postgres/pg-shipper.ts) in the cases a review found it
 * wrong: a unique value that moves from a deleted row to a new one, a commit whose answer is lost, and
 * a store that another server's working copy wrote to in between.
 */

const server = postgresForFile();

function psqlIn(url: string, sql: string): string {
  return server.psql(sql, new URL(url).pathname.slice(1)).trim();
}

/** A working copy of a fresh store with its shipper, built from `pool` when given (fault injection). */
async function workingCopy(url: string, pool?: (real: pg.Pool) => pg.Pool) {
  const store = await openPostgresStore(url, '--store', tempDir(), silentLogger());
  const real = new pg.Pool({ connectionString: url, max: 2 });
  real.on('error', () => {}); // an idle connection a database restart ends
  let shipper: PgShipper | null = null;
  const context = openTraceContext({
    dbPath: store.copy.path,
    logger: silentLogger(),
    upstream: (db) => {
      shipper = new PgShipper(db, pool?.(real) ?? real, store.copy, silentLogger(), {
        retry: { minMs: 20, maxMs: 50 },
      });
      return shipper;
    },
  });
  onTestFinished(async () => {
    await context.close();
    await real.end();
    await store.close();
  });
  return { context, shipper: shipper! };
}

describe.skipIf(!postgresTestsRun)('the working copy shipper', () => {
  it('a fingerprint deleted and its key taken by a new one in the same shipment reach the store', async () => {
    const url = freshDatabase(server);
    const { context } = await workingCopy(url);
    const insert = context.db.prepare(
      "INSERT INTO pattern_fingerprints (id, key, kind, features_json, created_at_us) VALUES (?, 'k1', 'task', '{}', 1)",
    );
    insert.run('fp_old');
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    context.db.transaction(() => {
      context.db.prepare("DELETE FROM pattern_fingerprints WHERE id = 'fp_old'").run();
      insert.run('fp_new');
    })();
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    expect(psqlIn(url, 'SELECT id FROM pattern_fingerprints')).toBe('fp_new');
  }, 60_000);

  it("a node's eviction of a shared fingerprint leaves the outcomes other nodes recorded for it", async () => {
    const url = freshDatabase(server);
    const { context } = await workingCopy(url);
    // This node learns a pattern; another node, sharing the store, learns the same one afterwards.
    const rows = new SqlitePatternRows(context.db);
    const outcome = {
      fingerprintId: 'fp_shared',
      key: 'k-shared',
      featuresJson: '{}',
      model: 'scripted:a',
      sessionId: 'sess_here',
      score: 1,
      costUsd: 0,
      turns: 1,
      atUs: 1,
    };
    rows.insertOutcome(outcome);
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    psqlIn(
      url,
      `INSERT INTO pattern_outcomes (id, fingerprint_id, model, session_id, score, cost_usd, turns, recorded_at_us)
       VALUES (9000000001, 'fp_shared', 'scripted:b', 'sess_there', 0.5, 0, 1, 2)`,
    );
    // This node evicts its only outcome of the fingerprint, and with it (here) the fingerprint.
    rows.deleteOldest(1);
    expect(context.db.prepare('SELECT count(*) FROM pattern_fingerprints').pluck().get()).toBe(0);
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    expect(psqlIn(url, 'SELECT session_id FROM pattern_outcomes')).toBe('sess_there');
    expect(psqlIn(url, 'SELECT id FROM pattern_fingerprints')).toBe('fp_shared');
    // Once no node has an outcome of it left, the fingerprint goes from the store too.
    psqlIn(url, 'DELETE FROM pattern_outcomes');
    rows.insertOutcome({ ...outcome, atUs: 3 });
    rows.deleteOldest(1);
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    expect(psqlIn(url, 'SELECT count(*) FROM pattern_fingerprints')).toBe('0');
  }, 60_000);

  it('a commit whose answer is lost is not shipped again', async () => {
    const url = freshDatabase(server);
    let lost = 0;
    let armed = false;
    // The first COMMIT goes through, then its answer is "lost": the shipper sees an error.
    const losing = (real: pg.Pool) =>
      ({
        query: real.query.bind(real),
        connect: async () => {
          const client = await real.connect();
          const query = client.query.bind(client) as (text: unknown, ...rest: unknown[]) => Promise<unknown>;
          // Only the COMMIT is wrapped: COPY hands back a stream, which must pass through untouched.
          (client as unknown as { query: typeof query }).query = (text, ...rest) => {
            if (text !== 'COMMIT' || !armed || lost > 0) return query(text, ...rest);
            lost += 1;
            return query(text, ...rest).then(() => {
              throw new Error('Connection terminated unexpectedly');
            });
          };
          return client;
        },
      }) as unknown as pg.Pool;
    const { context, shipper } = await workingCopy(url, losing);
    expect(await context.upstream!.whenShipped(10_000)).toBe(true); // the start's own changes
    armed = true;
    for (let i = 0; i < 20; i += 1)
      context.bus.emit({
        type: 'bus.subscriber_registered',
        session_id: 'system',
        payload: { subscription_name: `s${i}`, filter: {}, fast_path: false },
      });
    await context.flush();
    expect(await context.upstream!.whenShipped(10_000)).toBe(true);
    expect(lost).toBe(1);
    expect(shipper.failure).toBeNull();
    const local = context.db.prepare('SELECT count(*) FROM events').pluck().get();
    expect(Number(psqlIn(url, 'SELECT count(*) FROM events'))).toBe(local);
  }, 60_000);

  it('a copy holding events never sent to a store rewritten since is refused, not rebuilt over', async () => {
    const url = freshDatabase(server);
    const dir = tempDir();
    const start = () => serveOnStore(url, dir);
    const service = await start();
    const path = service.dbPath;
    await service.stop();
    // An event the server committed and could not ship (the database was away when it stopped)...
    const db = openDatabase(path, { create: false });
    db.prepare(
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       SELECT 'system', 'evt_ZZZZZZZZZZZZZZZZZZZZZZZZZZ', max(seq) + 1, 0, NULL, NULL, 'trace.swept', 'system', 'pseudonymous', '{}'
       FROM events WHERE session_id = 'system'`,
    ).run();
    db.close();
    // ...then the store is restored (a new epoch, no registered copy).
    psqlIn(url, "UPDATE metis_store_epoch SET epoch = 'restored'; DELETE FROM metis_working_copies");
    await expect(start()).rejects.toMatchObject({ code: 'METIS_ERR_STORE_DIVERGED' });
    expect(existsSync(path)).toBe(true);
  }, 60_000);

  it('the serve lock is taken again after a database restart, so a second server is still refused', async () => {
    const url = freshDatabase(server);
    const start = (dir: string) => serveOnStore(url, dir);
    const first = await start(tempDir());
    await server.stop();
    await server.start();
    const held = () =>
      psqlIn(url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") === '1';
    const deadline = Date.now() + 15_000;
    while (!held() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 200));
    expect(held()).toBe(true);
    await expect(start(tempDir())).rejects.toMatchObject({ code: 'METIS_ERR_DB_LOCKED' });
    // And the first server still ships.
    first.runtime.createSession({});
    expect(await first.trace.upstream!.whenShipped(15_000)).toBe(true);
  }, 60_000);

  it('a server started from another data folder makes the first one rebuild its copy', async () => {
    const url = freshDatabase(server);
    const start = (dir: string) => serveOnStore(url, dir);
    const [a, b] = [tempDir(), tempDir()];
    let service = await start(a);
    const first = service.runtime.createSession({}).id;
    await service.stop();
    service = await start(b);
    const second = service.runtime.createSession({}).id;
    await service.stop();
    service = await start(a);
    expect(service.runtime.sessions.getSession(first)).not.toBeNull();
    expect(service.runtime.sessions.getSession(second)).not.toBeNull();
    await service.stop();
    // Every session's seq is unique in the store: no two copies numbered the same events.
    expect(
      psqlIn(
        url,
        'SELECT count(*) FROM (SELECT session_id, seq FROM events GROUP BY 1, 2 HAVING count(*) > 1) d',
      ),
    ).toBe('0');
  }, 60_000);
});
