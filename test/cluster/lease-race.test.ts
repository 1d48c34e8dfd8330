import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import { acquireLease } from '../../src/core/store/postgres/session-leases.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35, cause 2 ("one lease granted twice"): a node asking for a lease while another node's
 * take-over holds the row locked must, once that commits, see the new owner alive and be refused. With
 * the lease and its node read in one `LEFT JOIN … FOR UPDATE OF l`, PostgreSQL re-checks only the
 * locked row after the wait and handed back the node's columns empty: the waiter read a dead owner and
 * took the lease too, both told `held: true`.
 */

const server = postgresForFile();

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  onTestFinished(() => client.end());
  return client;
}

describe.skipIf(!postgresTestsRun)('a lease asked for while another node takes it', () => {
  it('goes to one node: the one that waited is told who owns it', async () => {
    const url = freshDatabase(server);
    const admin = await connect(url);
    await migratePostgres(admin);
    const now = `(extract(epoch from clock_timestamp()) * 1000000)::bigint`;
    // node-z held sess_1 and went silent long ago; node-a and node-b are alive.
    await admin.query(
      `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us)
         VALUES ('node-z', 'http://z', 'z', 1, 'test', 1, 1),
                ('node-a', 'http://a', 'a', 2, 'test', ${now}, ${now}),
                ('node-b', 'http://b', 'b', 3, 'test', ${now}, ${now});
       INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us) VALUES ('sess_1', 'node-z', 1)`,
    );
    const nodeA = await connect(url);
    const nodeB = await connect(url);
    // node-a's take-over, held open: the lease row is locked and already names node-a.
    await nodeA.query('BEGIN');
    await nodeA.query("SELECT * FROM metis_session_leases WHERE session_id = 'sess_1' FOR UPDATE");
    await nodeA.query(`UPDATE metis_session_leases SET node_id = 'node-a', acquired_at_us = ${now}`);
    const asked = acquireLease(nodeB, 'sess_1', 'node-b', 10_000);
    // node-b's request waits on the row lock (seen in pg_stat_activity), then node-a commits.
    for (let i = 0; i < 100; i += 1) {
      const waiting = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%metis_session_leases%'",
      );
      if (waiting.rows[0].n > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await nodeA.query('COMMIT');
    const outcome = await asked;
    expect(outcome).toMatchObject({ held: false, owner: { node_id: 'node-a' } });
    const owner = await admin.query("SELECT node_id FROM metis_session_leases WHERE session_id = 'sess_1'");
    expect(owner.rows[0].node_id).toBe('node-a');
  }, 30_000);
});
