import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { monotonicFactory } from 'ulid';
import { PgEventStore } from '../../src/core/store/postgres/pg-event-store.js';

const DAY_MS = 86_400_000;
const OLD_SESSIONS = 100;
const ROWS_PER_COPY = 50_000;

/**
 * A store that is not new: N `text.delta` events 100 days old (ids of that time, so retention bounds
 * agree) over 100 ended-looking sessions `sess_old_<n>`, written by COPY into the store at `url` (its
 * schema created first). The cluster bench's retention and start-up figures run on it, and so do the
 * tests when METIS_TEST_STORE_EVENTS is set (helpers/postgres.ts).
 */
export async function loadOldEvents(url: string, total: number): Promise<void> {
  await (await PgEventStore.open({ url })).close(); // the schema
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const ms = Date.now() - 100 * DAY_MS;
    const nextUlid = monotonicFactory();
    const seqs = new Array<number>(OLD_SESSIONS).fill(0);
    for (let s = 0; s < OLD_SESSIONS; s += 1)
      await client.query('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ($1, $2, $2)', [
        `sess_old_${s}`,
        ms * 1000,
      ]);
    for (let done = 0; done < total; ) {
      const end = Math.min(done + ROWS_PER_COPY, total);
      let rows = '';
      for (; done < end; done += 1) {
        const s = done % OLD_SESSIONS;
        seqs[s]! += 1;
        rows += `sess_old_${s}\tevt_${nextUlid(ms)}\t${seqs[s]}\t${ms * 1000 + done}\tturn_old\t\\N\ttext.delta\tagent\tpseudonymous\t{"message_id":"msg_old","content_block_index":0,"text":"old ${done}"}\n`;
      }
      await client.query('BEGIN');
      await pipeline(
        Readable.from([rows]),
        client.query(
          copyFrom(
            'COPY events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json) FROM STDIN',
          ),
        ),
      );
      await client.query('COMMIT');
    }
    await client.query('ANALYZE events');
  } finally {
    await client.end();
  }
}
