import type pg from 'pg';
import { MetisError } from '../../errors.js';

/**
 * Forward-only migrations of the PostgreSQL store, numbered like SQLite's (`schema.ts`): migration N
 * brings a database from version N-1 to N, each in its own transaction; never edit a shipped one.
 * The version lives in `metis_schema`, one row.
 *
 * Layout: the spec's `events` columns (bus §7.1, plus `seq`) with the primary key `(session_id, id)`,
 * which serves a session's replay in id order (an index-only range scan), and `id` unique on its own.
 * `timestamp_us` is bigint: microseconds since the epoch, as in SQLite, so both stores hold the same
 * numbers and export byte-identical JSON. `payload_json` is text, not jsonb: the stored bytes are the
 * bytes replayed (jsonb would reorder keys and change the stream).
 */
export const PG_MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE events (
    session_id text NOT NULL,
    id text NOT NULL,
    seq bigint NOT NULL,
    timestamp_us bigint NOT NULL,
    turn_id text,
    parent_event_id text,
    type text NOT NULL,
    actor text NOT NULL,
    sensitivity text NOT NULL,
    payload_json text NOT NULL,
    PRIMARY KEY (session_id, id)
  );
  CREATE UNIQUE INDEX idx_events_id ON events (id);
  CREATE INDEX idx_events_type_timestamp ON events (type, timestamp_us);
  CREATE INDEX idx_events_turn ON events (turn_id);
  CREATE INDEX idx_events_parent ON events (parent_event_id);
  `,
];

export const PG_SCHEMA_VERSION = PG_MIGRATIONS.length;

/**
 * Brings the database to PG_SCHEMA_VERSION. Two servers starting at once both try: the advisory lock
 * makes the second wait and then find nothing to do. A database newer than this metis is refused.
 */
export async function migratePostgres(client: pg.ClientBase): Promise<number> {
  await client.query('SELECT pg_advisory_lock(hashtext($1))', ['metis_schema']);
  try {
    await client.query('CREATE TABLE IF NOT EXISTS metis_schema (version integer NOT NULL)');
    const found = await client.query<{ version: number }>('SELECT version FROM metis_schema');
    if (found.rowCount === 0) await client.query('INSERT INTO metis_schema (version) VALUES (0)');
    const current = found.rows[0]?.version ?? 0;
    if (current > PG_SCHEMA_VERSION)
      throw new MetisError(
        'METIS_ERR_SCHEMA_VERSION',
        `the PostgreSQL store is at schema version ${current}; this metis knows up to ${PG_SCHEMA_VERSION}`,
      );
    for (let version = current + 1; version <= PG_SCHEMA_VERSION; version += 1) {
      await client.query('BEGIN');
      try {
        await client.query(PG_MIGRATIONS[version - 1]!);
        await client.query('UPDATE metis_schema SET version = $1', [version]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      }
    }
    return PG_SCHEMA_VERSION;
  } finally {
    await client.query('SELECT pg_advisory_unlock(hashtext($1))', ['metis_schema']);
  }
}
