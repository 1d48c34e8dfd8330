import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { openPostgresContext } from '../../src/core/store/postgres/pg-context.js';
import { serveLockSql } from '../../src/core/store/postgres/serve-lock.js';
import { turnStarted } from '../helpers/events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * A server on PostgreSQL alone writes only while it holds the store's serve lock. The lock lives with its
 * connection: once that is lost (a database restart, a cut), another server may take the lock before
 * this one takes it again (the outage tests saw the writes resume 0.7 s before the lock was retaken).
 * In that gap two servers would write one store; so the writer waits, as in an outage, until the lock
 * is this server's again.
 */

const server = postgresForFile();

function psqlIn(url: string, sql: string): string {
  return server.psql(sql, new URL(url).pathname.slice(1)).trim();
}

describe.skipIf(!postgresTestsRun)('a server on PostgreSQL alone and its serve lock', () => {
  it('commits nothing while another process holds the lock it lost, and everything once it is back', async () => {
    const url = freshDatabase(server);
    const context = await openPostgresContext({ url, setting: 'store.url' });
    onTestFinished(() => context.close());
    // A session the runtime would have created or loaded: its seq starts here.
    context.bus.seedSeq('sess_gate', 0);
    const first = context.bus.emit(turnStarted('sess_gate', null, 'turn_1'))!;
    await context.writer.whenCommitted(first.id, 5_000);

    // The lock's connection is cut; another process takes the lock before this server can retake it.
    psqlIn(
      url,
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'metis serve-lock'",
    );
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    onTestFinished(() => other.end().catch(() => {}));
    let taken = false;
    for (let tries = 0; tries < 50 && !taken; tries += 1) {
      taken = (await other.query<{ free: boolean }>(serveLockSql(false))).rows[0]!.free;
      if (!taken) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(taken).toBe(true);
    // The server has seen its connection end (it logs and retakes in the background).
    await new Promise((resolve) => setTimeout(resolve, 200));

    const second = context.bus.emit(turnStarted('sess_gate', null, 'turn_2'))!;
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(psqlIn(url, `SELECT count(*) FROM events WHERE id = '${second.id}'`)).toBe('0');
    expect(context.writer.failure).not.toBeNull();
    expect(context.writer.storageRefusal().message).toContain('serve lock');

    // The other process lets go: the server takes the lock again and commits what waited, once.
    await other.end();
    await context.writer.whenCommitted(second.id, 10_000);
    expect(psqlIn(url, "SELECT count(*) FROM events WHERE session_id = 'sess_gate'")).toBe('2');
    expect(context.writer.failure).toBeNull();
  }, 30_000);
});
