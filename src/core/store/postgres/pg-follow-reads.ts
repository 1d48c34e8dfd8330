import type pg from 'pg';
import { EVENT_COLUMNS, type EventRow, rowToEvent } from '../event-rows.js';
import type { FollowReads, StoredMark } from '../follow-reads.js';
import { MAX_DELEGATION_DEPTH } from '../session-lineage.js';
import { firstOfEach, LINEAGE_SQL, type LineageRow } from '../stream-reads.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/**
 * One range scan of idx_events_session_seq per session (LATERAL), each stopping at `limit` rows: a
 * session far behind cannot make one answer hold all of its history. Exported for the test of its plan.
 */
export const EVENTS_AFTER_SQL = `SELECT e.* FROM unnest($1::text[], $2::int8[]) AS s(session_id, after_seq),
  LATERAL (SELECT ${EVENT_COLUMNS} FROM events WHERE events.session_id = s.session_id AND events.seq > s.after_seq
           ORDER BY events.seq LIMIT $3) AS e
  ORDER BY e.id`;

/** One backward probe of idx_events_session_seq per session: its highest seq, and that event's id. */
export const NEWEST_SQL = `SELECT s.session_id, newest.id, newest.seq FROM unnest($1::text[]) AS s(session_id),
  LATERAL (SELECT id, seq FROM events WHERE events.session_id = s.session_id
           ORDER BY events.seq DESC LIMIT 1) AS newest`;

/** The follower's reads (follow-reads.ts) answered by the PostgreSQL store of record. */
export function pgFollowReads(pool: pg.Pool): FollowReads {
  return {
    async eventsAfter(afterSeqBySession, limit) {
      if (afterSeqBySession.size === 0) return [];
      const result = await pool.query<EventRow>({
        text: EVENTS_AFTER_SQL,
        values: [[...afterSeqBySession.keys()], [...afterSeqBySession.values()], limit],
        rowMode: 'array',
        types: BIGINT_AS_NUMBER,
      });
      return result.rows.map(rowToEvent);
    },

    async newest(sessionIds) {
      const marks = new Map<string, StoredMark>();
      if (sessionIds.length === 0) return marks;
      const result = await pool.query<{ session_id: string; id: string; seq: number }>({
        text: NEWEST_SQL,
        values: [sessionIds],
        types: BIGINT_AS_NUMBER,
      });
      for (const row of result.rows) marks.set(row.session_id, { id: row.id, seq: row.seq });
      return marks;
    },

    async lineage(root) {
      const result = await pool.query<LineageRow>(LINEAGE_SQL, [root, MAX_DELEGATION_DEPTH]);
      return firstOfEach(result.rows).map((row) => row.id);
    },
  };
}
