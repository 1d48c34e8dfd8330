import pg from 'pg';
import { MetisError } from '../../errors.js';
import { PG_SCHEMA_VERSION } from './schema.js';

/** bigint columns as JavaScript numbers (microseconds, seq, counts: far below 2^53), as SQLite gives them. */
export const BIGINT_AS_NUMBER = {
  getTypeParser: (oid: number, format?: 'text' | 'binary') =>
    oid === 20 ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format),
} as pg.CustomTypesConfig;

/** A value in COPY's text format: `\N` for null; backslash, tab, newline and return escaped. */
export function copyTextField(value: unknown): string {
  if (value === null || value === undefined) return '\\N';
  const text = typeof value === 'string' ? value : String(value);
  return /[\\\t\n\r]/.test(text)
    ? text.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r')
    : text;
}

/**
 * `text` as an SQL string literal, the same text as pg's `escapeLiteral` (quotes and backslashes
 * doubled, ` E'…'` when there is a backslash). Why not escapeLiteral: it builds the result a character
 * at a time, and a group commit inlines every row value it writes (measured: 2,000 archived deltas,
 * ~300 KB, 38-48 ms with escapeLiteral against 1-3 ms here).
 */
export function quoteLiteral(text: string): string {
  const quoted = text.includes("'") ? text.replace(/'/g, "''") : text;
  return text.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

/**
 * Refuses, changing nothing, a database to be read that holds no metis store or one newer than this
 * metis; `label` names it in the message (the URL with its password hidden, and the flag).
 */
export async function assertReadableStore(client: pg.ClientBase, label: string): Promise<void> {
  const version = await client
    .query<{ version: number }>('SELECT version FROM metis_schema')
    .then((result) => result.rows[0]?.version ?? 0)
    .catch(() => 0);
  if (version === 0) throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${label} holds no metis store`);
  if (version > PG_SCHEMA_VERSION)
    throw new MetisError(
      'METIS_ERR_SCHEMA_VERSION',
      `${label} is at schema version ${version}; this metis knows up to ${PG_SCHEMA_VERSION}`,
    );
}

/**
 * A connection of `pool`, listened to for errors while it is checked out: the pool listens only to
 * idle ones, and an error the server sends while no query runs on it (a restart between two statements)
 * would otherwise be thrown from the socket's event and end the process. `release` discards a
 * connection that failed.
 */
export async function checkOut(
  pool: pg.Pool,
): Promise<{ client: pg.PoolClient; release(broken?: boolean): void }> {
  const client = await pool.connect();
  let lost = false;
  const onError = () => {
    lost = true;
  };
  client.on('error', onError);
  return {
    client,
    release(broken = false) {
      client.removeListener('error', onError);
      client.release(broken || lost);
    },
  };
}

/**
 * `query`, a read of one session's events in id order, in a read-only transaction with bitmap scans
 * off (SET LOCAL): the primary key (session_id, id) then yields the rows in that order as they are.
 * The planner, costing each row as a random page read, prefers a bitmap scan and a sort of them all;
 * with the pages cached (a warm replay) that took 24-29 ms of the server's time for 10,000 of
 * 1,000,000 events, the index scan 9-10 ms (EXPLAIN ANALYZE on bench/pg-store.ts's store). The log is
 * appended in id order, so id order is close to the pages' order on disk too. Costs two round trips.
 */
export function readInIdOrder<R extends unknown[]>(
  pool: pg.Pool,
  query: pg.QueryArrayConfig,
): Promise<pg.QueryArrayResult<R>> {
  return inTransaction(
    pool,
    (client) => client.query<R>(query),
    'BEGIN READ ONLY; SET LOCAL enable_bitmapscan = off',
  );
}

/**
 * Runs `work` in one transaction on a connection of `pool` (`begin` may name its isolation and mode):
 * committed when it resolves, rolled back when it throws. A connection that failed (a lost server, a
 * broken COPY) is discarded, not reused.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  begin = 'BEGIN',
): Promise<T> {
  const { client, release } = await checkOut(pool);
  let broken = false;
  try {
    await client.query(begin);
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    broken = true;
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    release(broken);
  }
}
