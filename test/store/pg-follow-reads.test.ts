import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { FOLLOW_PAGE, storedAfter, storedThrough } from '../../src/core/cluster/stored-pages.js';
import { EVENT_COLUMNS, type EventRow, rowToEvent } from '../../src/core/store/event-rows.js';
import {
  EVENTS_AFTER_SQL,
  NEWEST_SQL,
  pgFollowReads,
} from '../../src/core/store/postgres/pg-follow-reads.js';
import { BIGINT_AS_NUMBER } from '../../src/core/store/postgres/pg-util.js';
import { loadOldEvents } from '../helpers/pg-old-events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * What a follower reads of PostgreSQL (pg-follow-reads.ts, stored-pages.ts): a family's events after
 * each session's seq in id order, whole whatever the page size, a session's gap up to a seq, where
 * each session stands, its lineage; each read a range of an index, not the table. On a store of
 * 20,000 events whose sessions' ids interleave (pg-old-events.ts: 200 a session).
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('the follower’s reads of PostgreSQL', () => {
  it('reads sessions’ events after their seqs in id order, page by page, and where each stands', async () => {
    const url = freshDatabase(server);
    await loadOldEvents(url, 20_000);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    onTestFinished(() => pool.end());
    await pool.query(
      "INSERT INTO sessions (id, parent_session_id, created_at_us, updated_at_us) VALUES ('sess_w', 'sess_old_5', 0, 0), ('sess_ww', 'sess_w', 0, 0)",
    );
    const reads = pgFollowReads(pool);
    /** Every stored event of the sessions after their seqs, in id order: what the pages must add up to. */
    const everything = async (after: Map<string, number>) => {
      const result = await pool.query<EventRow>({
        text: `SELECT ${EVENT_COLUMNS} FROM events WHERE session_id = ANY($1) ORDER BY id`,
        values: [[...after.keys()]],
        rowMode: 'array',
        types: BIGINT_AS_NUMBER,
      });
      return result.rows.map(rowToEvent).filter((event) => event.seq! > after.get(event.session_id)!);
    };
    const after = new Map([
      ['sess_old_5', 150],
      ['sess_old_7', 0],
      ['sess_old_9', 199],
      ['sess_none', 0],
    ]);
    const all = await everything(after);
    expect(all).toHaveLength(50 + 200 + 1);
    for (const limit of [1, 7, 49, 50, 51, FOLLOW_PAGE])
      expect(await storedAfter(reads, after, limit)).toEqual(all);
    // One page: at most `limit` of each session, its lowest seqs, in id order.
    const page = await reads.eventsAfter(after, 3);
    expect(page.map((event) => [event.session_id, event.seq])).toEqual(
      expect.arrayContaining([
        ['sess_old_5', 151],
        ['sess_old_5', 153],
        ['sess_old_7', 3],
        ['sess_old_9', 200],
      ]),
    );
    expect(page).toHaveLength(7);
    expect(page.map((event) => event.id)).toEqual(page.map((event) => event.id).sort());

    const gap = await storedThrough(reads, 'sess_old_7', 10, 30, 6);
    expect(gap.map((event) => event.seq)).toEqual(Array.from({ length: 20 }, (_, i) => 11 + i));
    expect(await storedThrough(reads, 'sess_old_7', 30, 30)).toEqual([]);

    const newest = await reads.newest(['sess_old_5', 'sess_none', 'sess_old_7']);
    expect([...newest.keys()].sort()).toEqual(['sess_old_5', 'sess_old_7']);
    expect(newest.get('sess_old_5')).toEqual({
      id: all.filter((e) => e.session_id === 'sess_old_5').at(-1)!.id,
      seq: 200,
    });
    expect(await reads.lineage('sess_old_5')).toEqual(['sess_old_5', 'sess_w', 'sess_ww']);
    expect(await reads.lineage('sess_w')).toEqual(['sess_w', 'sess_ww']);
  }, 120_000);

  it('reads a range of the (session_id, seq) index per session, not the table', async () => {
    const url = freshDatabase(server);
    await loadOldEvents(url, 20_000);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    onTestFinished(() => client.end());
    const plan = async (text: string, values: unknown[]) =>
      (await client.query(`EXPLAIN ${text}`, values)).rows.map((row) => row['QUERY PLAN']).join('\n');
    const eventsAfter = await plan(EVENTS_AFTER_SQL, [['sess_old_5', 'sess_old_7'], [150, 190], 1000]);
    expect(eventsAfter).toContain('idx_events_session_seq');
    expect(eventsAfter).not.toContain('Seq Scan');
    const newest = await plan(NEWEST_SQL, [['sess_old_5', 'sess_old_7']]);
    expect(newest).toContain('Index Scan Backward using idx_events_session_seq');
    expect(newest).not.toContain('Seq Scan');
  }, 120_000);
});
