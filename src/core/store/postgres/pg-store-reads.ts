import type pg from 'pg';
import { eventIdFloor } from '../../events/ids.js';
import type { HourCount } from '../stats.js';
import type { WholeStoreReads } from '../whole-store-reads.js';
import { postgresPool } from './connect.js';
import { postgresTraceStats } from './pg-inspect.js';
import { pgSessionListRow, searchPgSessions } from './pg-session-search.js';
import { pgUsageByBucket } from './pg-usage-stats.js';

const HOUR_MS = 3_600_000;

/** The stored events of each of the last `hours` UTC hours, oldest first, as stats.ts `eventsPerHour`. */
export async function pgEventsPerHour(
  client: pg.ClientBase | pg.Pool,
  hours: number,
  nowMs = Date.now(),
): Promise<HourCount[]> {
  const end = Math.floor(nowMs / HOUR_MS) * HOUR_MS + HOUR_MS;
  const start = end - hours * HOUR_MS;
  const rows = await client.query<HourCount>(
    `SELECT to_char(to_timestamp(timestamp_us / 1000000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24') AS hour,
            count(*)::int AS count
       FROM events WHERE id >= $1 GROUP BY 1`,
    [eventIdFloor(start)],
  );
  const counts = new Map(rows.rows.map((row) => [row.hour, row.count]));
  const series: HourCount[] = [];
  for (let at = start; at < end; at += HOUR_MS) {
    const hour = new Date(at).toISOString().slice(0, 13);
    series.push({ hour, count: counts.get(hour) ?? 0 });
  }
  return series;
}

/** The reads spanning every session, from the store of record, on a pool of their own. */
export function pgStoreReads(url: string): WholeStoreReads & { close(): Promise<void> } {
  const pool = postgresPool(url, 'serve', 2);
  return {
    sessions: {
      search: (search) => searchPgSessions(pool, search),
      row: (sessionId) => pgSessionListRow(pool, sessionId),
    },
    usage: (query) => pgUsageByBucket(pool, query),
    storeStats: async (hours) => {
      const { by_session: _, ...stats } = await postgresTraceStats(url);
      return { ...stats, by_hour: await pgEventsPerHour(pool, hours) };
    },
    close: () => pool.end().catch(() => {}),
  };
}
