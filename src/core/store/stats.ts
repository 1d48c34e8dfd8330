import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { MetisError } from '../errors.js';
import { eventIdFloor } from '../events/ids.js';
import { summarizeDatabase } from './backup.js';
import { type Db, openDatabase } from './database.js';

export interface TypeCount {
  readonly type: string;
  readonly count: number;
}

export interface SessionCount {
  readonly session_id: string;
  readonly count: number;
}

/** What `metis trace stats` reports. Counts are sorted by count, largest first (ties by name). */
export interface TraceStats {
  readonly db_path: string;
  readonly schema_version: number;
  readonly file_bytes: number;
  /** Size of the `-wal` file (0 when there is none): commits not yet checkpointed into the file. */
  readonly wal_bytes: number;
  readonly event_count: number;
  /** Sessions that have at least one stored event (including the `system` session). */
  readonly session_count: number;
  readonly oldest_event_timestamp: string | null;
  readonly newest_event_timestamp: string | null;
  readonly by_type: readonly TypeCount[];
  readonly by_session: readonly SessionCount[];
}

function fileSize(path: string): number {
  return existsSync(path) ? statSync(path).size : 0;
}

/**
 * Counts events by type (from the type index) and by session (from the clustered key) on a read-only
 * connection. Sizes are taken before opening, so the connection's own `-wal` does not count.
 * @throws MetisError when the file is missing or is not a metis database of this schema version.
 */
export function traceStats(dbPath: string): TraceStats {
  const path = resolve(dbPath);
  if (!existsSync(path)) throw new MetisError('METIS_ERR_DB_NOT_FOUND', `no database at ${path}`);
  const fileBytes = fileSize(path);
  const walBytes = fileSize(`${path}-wal`);
  const db = openDatabase(path, { readonly: true });
  try {
    const summary = summarizeDatabase(db);
    const byType = db
      .prepare('SELECT type, count(*) AS count FROM events GROUP BY type ORDER BY count DESC, type')
      .all() as TypeCount[];
    const bySession = db
      .prepare(
        'SELECT session_id, count(*) AS count FROM events GROUP BY session_id ORDER BY count DESC, session_id',
      )
      .all() as SessionCount[];
    return {
      db_path: path,
      schema_version: summary.schema_version,
      file_bytes: fileBytes,
      wal_bytes: walBytes,
      event_count: summary.event_count,
      session_count: bySession.length,
      oldest_event_timestamp: summary.oldest_event_timestamp,
      newest_event_timestamp: summary.newest_event_timestamp,
      by_type: byType,
      by_session: bySession,
    };
  } finally {
    db.close();
  }
}

/** Events stored in one hour (UTC), `hour` as `2026-11-27T14`. */
export interface HourCount {
  readonly hour: string;
  readonly count: number;
}

/**
 * Events stored per hour over the last `hours` hours, oldest first, hours without events included as 0
 * (a chart's bars are then evenly spaced). The range is read through the id index: an event id begins
 * with its millisecond (ULID), so `id >= evt_<ULID of the start>` selects the range without a scan.
 */
export function eventsPerHour(db: Db, hours: number, nowMs = Date.now()): HourCount[] {
  const hourMs = 3_600_000;
  const end = Math.floor(nowMs / hourMs) * hourMs + hourMs;
  const start = end - hours * hourMs;
  const counts = new Map(
    (
      db
        .prepare(
          `SELECT strftime('%Y-%m-%dT%H', timestamp_us / 1000000, 'unixepoch') AS hour, count(*) AS count
             FROM events WHERE id >= ? GROUP BY hour`,
        )
        .all(eventIdFloor(start)) as HourCount[]
    ).map((row) => [row.hour, row.count]),
  );
  const series: HourCount[] = [];
  for (let at = start; at < end; at += hourMs) {
    const hour = new Date(at).toISOString().slice(0, 13);
    series.push({ hour, count: counts.get(hour) ?? 0 });
  }
  return series;
}
