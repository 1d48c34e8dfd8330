import type pg from 'pg';
import type { DroppedRunReads } from '../dropped-run-reads.js';

/** Both ends of a run in one round trip; each walks the (session_id, seq) index from the run outwards. */
const BOUNDS_SQL = `
  SELECT (SELECT id FROM events WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC, id LIMIT 1) AS before,
         (SELECT id FROM events WHERE session_id = $1 AND seq > $3 ORDER BY seq, id LIMIT 1) AS after`;

/** DroppedRunReads over PostgreSQL, on the writer's pool: ids are `COLLATE "C"`, ordered as SQLite's. */
export function pgDroppedRunReads(pool: pg.Pool): DroppedRunReads {
  return {
    bounds: async (sessionId, firstSeq, lastSeq) => {
      // A run of events with no `seq` has no neighbours by `seq` (SQLite compares with NULL: none).
      if (!Number.isFinite(firstSeq) || !Number.isFinite(lastSeq)) return { before: null, after: null };
      const result = await pool.query<{ before: string | null; after: string | null }>({
        text: BOUNDS_SQL,
        values: [sessionId, firstSeq, lastSeq],
      });
      const row = result.rows[0];
      return { before: row?.before ?? null, after: row?.after ?? null };
    },
    reported: async (sessionId, gapStartId) => {
      const result = await pool.query({
        text: 'SELECT 1 FROM reported_gaps WHERE session_id = $1 AND gap_start_id = $2',
        values: [sessionId, gapStartId],
      });
      return (result.rowCount ?? 0) > 0;
    },
  };
}
