import type pg from 'pg';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';

/** Taken by every transaction that numbers `system` events, so that two writers never give out one seq. */
const SYSTEM_SEQ_LOCK_SQL = "hashtext('metis_system_seq')";

/**
 * `rows` with their `system` events numbered after the store's last one, in the order given (the order
 * they are written in); other rows are returned as they are. Every node writes the `system` session, so
 * its seq is given out by the store: inside the caller's transaction, under an advisory lock held to its
 * end (a sequence would leave holes on rollback that the gap scan reports). Costs two round trips, and
 * none when no row is a `system` event.
 */
export async function numberSystemEvents<Row>(
  client: pg.ClientBase,
  rows: readonly Row[],
  sessionOf: (row: Row) => string,
  withSeq: (row: Row, seq: number) => Row,
): Promise<readonly Row[]> {
  if (!rows.some((row) => sessionOf(row) === SYSTEM_SESSION_ID)) return rows;
  await client.query(`SELECT pg_advisory_xact_lock(${SYSTEM_SEQ_LOCK_SQL})`);
  // A statement of its own, after the lock: its snapshot then sees the last holder's commit.
  let seq = Number(
    (
      await client.query<{ last: number }>(
        'SELECT coalesce(max(seq), 0)::bigint AS last FROM events WHERE session_id = $1',
        [SYSTEM_SESSION_ID],
      )
    ).rows[0]!.last,
  );
  return rows.map((row) => {
    if (sessionOf(row) !== SYSTEM_SESSION_ID) return row;
    seq += 1;
    return withSeq(row, seq);
  });
}
