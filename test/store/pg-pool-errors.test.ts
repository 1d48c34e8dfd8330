import { describe, expect, it, onTestFinished } from 'vitest';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * A restart's FATAL reaching a pooled connection that nobody listens to ends the process (issue 35,
 * cause 3). pg-pool listens to a connection only while it is idle or inside `pool.query`; one checked
 * out and between two statements must still have a listener.
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('pooled PostgreSQL connections', () => {
  it('a connection checked out and idle outlives its backend being terminated', async () => {
    const pool = postgresPool(freshDatabase(server), 'serve', 2);
    onTestFinished(() => pool.end());
    const client = await pool.connect();
    expect(client.listenerCount('error')).toBeGreaterThan(0);
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const lost = new Promise<void>((resolve) => client.once('end', () => resolve()));
    await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await lost;
    client.release(true);
    // The pool goes on with a new connection.
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});
