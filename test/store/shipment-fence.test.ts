import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { PgShipper } from '../../src/core/store/postgres/pg-shipper.js';
import { openPostgresStore } from '../../src/core/store/postgres/serve-store.js';
import { acquireLease } from '../../src/core/store/postgres/session-leases.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 35, cause 1 ("two owners write one session"): a node's shipment reads the leases of the
 * sessions it ships to leave out those another node took. It locked only the other nodes' lease rows,
 * so a node taking one of this node's sessions over did not wait for a shipment under way, and that
 * shipment committed the session's events after the take-over (duplicate seq, a turn ended twice).
 */

const server = postgresForFile();

describe.skipIf(!postgresTestsRun)('a shipment under way and a take-over of its session', () => {
  it('the take-over waits until the shipment committed', async () => {
    const url = freshDatabase(server);
    const store = await openPostgresStore(url, '--store', tempDir(), silentLogger());
    const real = new pg.Pool({ connectionString: url, max: 2 });
    real.on('error', () => {});
    let holdCommit: (() => void) | null = null;
    let commitHeld = false;
    let armed = false;
    // The shipment's COMMIT waits, once armed, until the test lets it go: a shipment frozen in flight.
    const pausing = {
      query: real.query.bind(real),
      connect: async () => {
        const client = await real.connect();
        const query = client.query.bind(client) as (text: unknown, ...rest: unknown[]) => Promise<unknown>;
        (client as unknown as { query: typeof query }).query = (text, ...rest) => {
          if (text !== 'COMMIT' || !armed) return query(text, ...rest);
          armed = false;
          commitHeld = true;
          return new Promise<void>((resolve) => (holdCommit = resolve)).then(() => query(text, ...rest));
        };
        return client;
      },
      on: real.on.bind(real),
    } as unknown as pg.Pool;
    const context = openTraceContext({
      dbPath: store.copy.path,
      logger: silentLogger(),
      upstream: (db) =>
        new PgShipper(db, pausing, store.copy, silentLogger(), {
          retry: { minMs: 20, maxMs: 50 },
          fenceFor: 'node-a',
        }),
    });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const taker = new pg.Client({ connectionString: url });
    await taker.connect();
    onTestFinished(async () => {
      holdCommit?.();
      await context.close();
      await real.end();
      await store.close();
      await admin.end();
      await taker.end();
    });
    expect(await context.upstream!.whenShipped(10_000)).toBe(true); // the start's own changes
    // node-a (this copy) leases sess_1 and has gone silent by the store's clock; node-b is alive.
    await admin.query(
      `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us)
         VALUES ('node-a', 'http://a', 'a', 1, 'test', 1, 1),
                ('node-b', 'http://b', 'b', 2, 'test', 1, (extract(epoch from clock_timestamp()) * 1000000)::bigint);
       INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us) VALUES ('sess_1', 'node-a', 1)`,
    );
    armed = true;
    context.bus.emit({
      type: 'bus.subscriber_registered',
      session_id: 'sess_1',
      payload: { subscription_name: 'watcher', filter: {}, fast_path: false },
    });
    await context.flush();
    for (let i = 0; i < 500 && !commitHeld; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(commitHeld).toBe(true);

    let settled = false;
    const takeOver = acquireLease(taker, 'sess_1', 'node-b', 1_000).finally(() => {
      settled = true;
    });
    let waitedOnLock = false;
    for (let i = 0; i < 100 && !settled && !waitedOnLock; i += 1) {
      const waiting = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%metis_session_leases%'",
      );
      waitedOnLock = waiting.rows[0].n > 0;
      if (!waitedOnLock) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect({ waitedOnLock, settledBeforeTheShipmentCommitted: settled }).toEqual({
      waitedOnLock: true,
      settledBeforeTheShipmentCommitted: false,
    });
    holdCommit!();
    expect(await takeOver).toEqual({ held: true, taken: true, token: expect.any(Number) });
  }, 60_000);
});
