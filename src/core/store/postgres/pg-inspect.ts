import type pg from 'pg';
import { MetisError } from '../../errors.js';
import { microsToIso } from '../../events/clock.js';
import { SENSITIVITIES } from '../../events/envelope.js';
import type { EventRow } from '../event-rows.js';
import { type ExportQuery, exportBounds } from '../export.js';
import type { TraceStats } from '../stats.js';
import { redactUrl } from '../store-copy.js';
import { postgresClient } from './connect.js';
import { assertReadableStore } from './pg-util.js';
import { SERVE_LOCK_SQL } from './schema.js';

/** Rows read per round trip of an export. */
const PAGE = 5_000;

/**
 * A read-only connection to a PostgreSQL store, refusing one that is not a metis store or is newer
 * than this metis. The error names the URL (password redacted) and what is wrong.
 */
export async function connectReadableStore(url: string): Promise<pg.Client> {
  const client = postgresClient(url, 'inspect');
  try {
    await client.connect();
    await assertReadableStore(client, redactUrl(url));
    return client;
  } catch (error) {
    await client.end().catch(() => {});
    if (error instanceof MetisError) throw error;
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--store: cannot use ${redactUrl(url)}: ${(error as Error).message}`,
      {
        cause: error,
        hint: 'Check the URL: host, port, user, password and database.',
      },
    );
  }
}

/**
 * The events an export asks for, in id order, as SQLite's rows (so the same encoder writes them): one
 * repeatable-read transaction, so the export is a consistent snapshot while servers write, read a page
 * at a time after the last id.
 */
export async function* postgresExportRows(url: string, query: ExportQuery): AsyncGenerator<EventRow> {
  const client = await connectReadableStore(url);
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const { sinceId, untilId } = exportBounds(query);
    const allSensitivities = query.sensitivities.length === SENSITIVITIES.length;
    let after = query.afterId ?? '';
    for (;;) {
      const result = await client.query({
        text: `SELECT id, timestamp_us, session_id, turn_id, parent_event_id, type, actor, sensitivity, payload_json, seq
                 FROM events
                WHERE id > $1
                  AND ($2::text IS NULL OR session_id = $2)
                  AND ($3::text[] IS NULL OR type = ANY($3))
                  AND ($4::text IS NULL OR (id >= $4 AND timestamp_us >= $5))
                  AND ($6::text IS NULL OR (id < $6 AND timestamp_us <= $7))
                  AND ($8::text[] IS NULL OR sensitivity = ANY($8))
                ORDER BY id LIMIT ${PAGE}`,
        values: [
          after,
          query.sessionId,
          query.types,
          sinceId,
          query.sinceUs,
          untilId,
          query.untilUs,
          allSensitivities ? null : query.sensitivities,
        ],
        rowMode: 'array',
      });
      for (const row of result.rows as EventRow[]) yield row;
      if (result.rows.length < PAGE) break;
      after = (result.rows.at(-1) as EventRow)[0];
    }
    await client.query('COMMIT');
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * `metis trace stats` of a PostgreSQL store: the same fields and orders as SQLite's, byte order for
 * names (the columns are COLLATE "C", schema.ts). `file_bytes` is the database's size on disk; PostgreSQL's
 * write-ahead log is the server's, not the database's, so `wal_bytes` is 0.
 */
export async function postgresTraceStats(url: string): Promise<TraceStats> {
  const client = await connectReadableStore(url);
  try {
    const one = async <T>(sql: string): Promise<T> => (await client.query(sql)).rows[0] as T;
    const edge = async (order: 'ASC' | 'DESC') => {
      const row = await one<{ timestamp_us: number } | undefined>(
        `SELECT timestamp_us FROM events ORDER BY id ${order} LIMIT 1`,
      );
      return row === undefined ? null : microsToIso(row.timestamp_us);
    };
    const byType = (
      await client.query<{ type: string; count: number }>(
        'SELECT type, count(*)::bigint AS count FROM events GROUP BY type ORDER BY count DESC, type',
      )
    ).rows;
    const bySession = (
      await client.query<{ session_id: string; count: number }>(
        'SELECT session_id, count(*)::bigint AS count FROM events GROUP BY session_id ORDER BY count DESC, session_id',
      )
    ).rows;
    return {
      db_path: redactUrl(url),
      schema_version: (await one<{ version: number }>('SELECT version FROM metis_schema')).version,
      file_bytes: (await one<{ size: number }>('SELECT pg_database_size(current_database())::bigint AS size'))
        .size,
      wal_bytes: 0,
      event_count: (await one<{ n: number }>('SELECT count(*)::bigint AS n FROM events')).n,
      session_count: bySession.length,
      oldest_event_timestamp: await edge('ASC'),
      newest_event_timestamp: await edge('DESC'),
      by_type: byType,
      by_session: bySession,
    };
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * What `metis doctor` says of a PostgreSQL store, changing nothing: its schema version (0 when none),
 * whether this user may create the schema, and whether a server holds it (read from pg_locks: taking
 * the lock, even for a moment, could turn a server starting then away).
 */
export async function storeStateOf(
  client: pg.ClientBase,
): Promise<{ version: number; mayCreate: boolean; held: boolean }> {
  const state = (
    await client.query<{ present: boolean; create: boolean; held: boolean }>(
      `SELECT to_regclass('metis_schema') IS NOT NULL AS present,
              has_schema_privilege(current_schema(), 'CREATE') AS create,
              EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                        AND ((classid::bigint << 32) | objid::bigint) = ${SERVE_LOCK_SQL}::bigint) AS held`,
    )
  ).rows[0]!;
  // A schema table without its row is what an interrupted first start leaves: the next start repairs it.
  const version = state.present
    ? ((await client.query<{ version: number }>('SELECT version FROM metis_schema')).rows[0]?.version ?? 0)
    : 0;
  return { version, mayCreate: state.create, held: state.held };
}
