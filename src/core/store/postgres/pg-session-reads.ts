import type pg from 'pg';
import type { SessionReads } from '../session-reads.js';
import type { SessionRecord } from '../session-store.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/** A session's row from PostgreSQL, with the same JavaScript types SQLite's answer has. */
export async function pgSessionRow(pool: pg.Pool, sessionId: string): Promise<SessionRecord | null> {
  const result = await pool.query({
    text: 'SELECT * FROM sessions WHERE id = $1',
    values: [sessionId],
    types: BIGINT_AS_NUMBER,
  });
  return (result.rows[0] as SessionRecord | undefined) ?? null;
}

/** SessionReads over a PostgreSQL store (store-port.md step 7). */
export function pgSessionReads(pool: pg.Pool): SessionReads {
  return { session: (sessionId) => pgSessionRow(pool, sessionId) };
}
