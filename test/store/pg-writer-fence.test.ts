import type pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { MetisError } from '../../src/core/errors.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { openPgWriter, poolQueryingThrough } from '../helpers/pg-store-writer.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session } from '../helpers/row-change-builders.js';
import { message, recorded, spend } from '../helpers/writer-rows.js';

/**
 * PgStoreWriter's lease fence checked by the store itself (pg-writer-batch.ts, schema 16): a batch of
 * families this node holds commits in the one query of its group commit, COMMIT included; a family
 * lost since the last batch (another node's now, or this node's under a new token) is left out of it
 * while the batch's other families commit.
 */

const server = postgresForFile();

/**
 * `real`, recording the text of every query its clients send (a batch query by its statements); once
 * `loseNextCommit` is called, the next query that ends with COMMIT and succeeds has its answer lost.
 */
function recordQueries(real: pg.Pool): { pool: pg.Pool; sent: string[]; loseNextCommit(): void } {
  const sent: string[] = [];
  let lose = false;
  const lost = () => new Error('Connection terminated unexpectedly (test: the answer to COMMIT is lost)');
  const pool = poolQueryingThrough(real, (query, text, rest) => {
    const statements = typeof text === 'string' ? text : String((text as { text?: unknown }).text);
    sent.push(statements);
    if (!lose || !/(^|;\s*)COMMIT$/.test(statements)) return query(text, ...rest);
    lose = false;
    // A query the store refused (the fence check) had no COMMIT to lose: the next one is lost.
    const refused = (error: Error) => {
      lose = true;
      return error;
    };
    if (typeof text === 'string')
      return query(text, ...rest).then(
        () => Promise.reject(lost()),
        (error: Error) => Promise.reject(refused(error)),
      );
    const batch = text as { callback(error: Error | null): void };
    const answer = batch.callback.bind(batch);
    batch.callback = (error) => answer(error === null ? lost() : refused(error));
    return query(text, ...rest);
  });
  return { pool, sent, loseNextCommit: () => (lose = true) };
}

/** A writer of node-a whose sessions `sess_<x>` are families `fam_<x>` under the tokens given. */
async function fencedWriter(tokens: Record<string, number>) {
  const url = freshDatabase(server);
  const real = postgresPool(url, 'serve', 2);
  onTestFinished(() => real.end());
  const link = recordQueries(real);
  const fenced: string[][] = [];
  const opened = await openPgWriter(server, {
    url,
    pool: link.pool,
    writerId: 'node-a',
    fence: {
      nodeId: 'node-a',
      leaseOf: (id) => {
        const root = id.replace(/^sess_/, 'fam_');
        return tokens[root] === undefined ? null : { root, token: tokens[root] };
      },
      onFenced: (roots) => fenced.push([...roots].sort()),
    },
  });
  for (const [root, token] of Object.entries(tokens))
    await opened.pool.query(
      `INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us, token) VALUES ($1, 'node-a', 1, $2)`,
      [root, token],
    );
  await opened.flush(); // the bus's own first event
  link.sent.length = 0;
  return { ...opened, sent: link.sent, loseNextCommit: link.loseNextCommit, fenced };
}

/** The outcome of each event's wait: 'committed', or the code of the error it was refused with. */
function outcomesOf(writer: { whenCommitted(id: string, ms: number): Promise<void> }, events: MetisEvent[]) {
  return Promise.all(
    events.map((event) =>
      writer.whenCommitted(event.id, 10_000).then(
        () => 'committed',
        (error: MetisError) => error.code,
      ),
    ),
  );
}

describe.runIf(postgresTestsRun)('PgStoreWriter: the lease fence checked by the store', () => {
  it('commits a batch of families this node holds in one query, the fence checked and COMMIT in it', async () => {
    const { bus, writer, pool, flush, sent, fenced } = await fencedWriter({ fam_a: 11, fam_b: 12 });
    const settled: string[] = [];
    const events: MetisEvent[] = [];
    for (const id of ['sess_a', 'sess_b']) {
      writer.writeRow(recorded(session(id, 1), settled, `session:${id}`));
      events.push(bus.emit(sessionCreated(id))!);
      writer.writeRow(recorded(message(`msg_${id}`, id, 'user', 'hi'), settled, `msg:${id}`));
    }
    expect(await outcomesOf(writer, events)).toEqual(['committed', 'committed']);
    await flush();
    expect(fenced).toEqual([]);
    expect(settled.every((entry) => entry.endsWith(':true'))).toBe(true);
    // One query for the whole batch: no lease read to answer, no COMMIT or ROLLBACK of its own.
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatch(/^BEGIN;[\s\S]*metis_hold_leases\('node-a'[\s\S]*COPY events[\s\S]*;\s*COMMIT$/);
    expect(
      (await pool.query("SELECT session_id FROM events WHERE session_id <> 'system' ORDER BY 1")).rows,
    ).toEqual([{ session_id: 'sess_a' }, { session_id: 'sess_b' }]);
    expect((await pool.query('SELECT session_id FROM messages ORDER BY 1')).rows).toEqual([
      { session_id: 'sess_a' },
      { session_id: 'sess_b' },
    ]);
  });

  it('leaves out a family another node took over since the last batch; the batch’s other families commit', async () => {
    const { bus, writer, pool, flush, sent, fenced } = await fencedWriter({
      fam_a: 21,
      fam_b: 22,
      fam_c: 23,
    });
    const ids = ['sess_a', 'sess_b', 'sess_c'];
    const first: MetisEvent[] = [];
    for (const id of ids) {
      writer.writeRow({ what: 'session', change: session(id, 1) });
      first.push(bus.emit(sessionCreated(id))!);
    }
    expect(await outcomesOf(writer, first)).toEqual(['committed', 'committed', 'committed']);
    await flush();
    // Between the batches node-b takes fam_b over, as acquireLease does.
    await pool.query(
      `UPDATE metis_session_leases SET node_id = 'node-b', token = nextval('metis_lease_tokens')
        WHERE session_id = 'fam_b'`,
    );
    const batchesBefore = writer.stats.committedBatches;
    sent.length = 0;
    const settled: string[] = [];
    const second: MetisEvent[] = [];
    for (const id of ids) {
      second.push(bus.emit(turnStarted(id))!);
      writer.writeRow(recorded(message(`msg_${id}`, id, 'user', 'hi'), settled, id));
    }
    const outcomes = await outcomesOf(writer, second);
    await flush();
    expect(outcomes).toEqual(['committed', 'METIS_ERR_SESSION_ELSEWHERE', 'committed']);
    expect(settled.sort()).toEqual(['sess_a:true', 'sess_b:false', 'sess_c:true']);
    expect(fenced).toEqual([['fam_b']]);
    // One group commit: the families of the batch were settled together.
    expect(writer.stats.committedBatches).toBe(batchesBefore + 1);
    // The store's check refused the one-query try; its COMMIT never ran.
    expect(sent[0]).toMatch(/metis_hold_leases[\s\S]*;\s*COMMIT$/);
    expect(sent.at(-1)).toBe('COMMIT');
    expect(
      (await pool.query("SELECT session_id FROM events WHERE type = 'turn.started' ORDER BY 1")).rows,
    ).toEqual([{ session_id: 'sess_a' }, { session_id: 'sess_c' }]);
    expect((await pool.query('SELECT session_id FROM messages ORDER BY 1')).rows).toEqual([
      { session_id: 'sess_a' },
      { session_id: 'sess_c' },
    ]);
  });

  it.each([
    // Tokens come from one sequence, so a new owner has a new token; the check asks for both anyway.
    ['names another node under the token this writer holds', "node_id = 'node-b'"],
    // This node took the family again (a restart): the writer still carries the old token.
    ['is this node’s under a new token', "token = nextval('metis_lease_tokens')"],
  ])('leaves out a family whose lease %s', async (_, change) => {
    const { bus, writer, pool, flush, fenced } = await fencedWriter({ fam_a: 31, fam_b: 32 });
    await pool.query(`UPDATE metis_session_leases SET ${change} WHERE session_id = 'fam_b'`);
    const events = [bus.emit(sessionCreated('sess_a'))!, bus.emit(sessionCreated('sess_b'))!];
    expect(await outcomesOf(writer, events)).toEqual(['committed', 'METIS_ERR_SESSION_ELSEWHERE']);
    await flush();
    expect(fenced).toEqual([['fam_b']]);
    expect(
      (await pool.query("SELECT session_id FROM events WHERE session_id <> 'system' ORDER BY 1")).rows,
    ).toEqual([{ session_id: 'sess_a' }]);
  });

  it.each([
    ['the one query of a batch this node holds', false],
    ['the COMMIT after a family was found lost', true],
  ])(
    'settles from the commit mark, as it was sent, a batch whose answer to %s was lost',
    async (_, takenOver) => {
      const { bus, writer, pool, flush, loseNextCommit, fenced } = await fencedWriter({
        fam_a: 41,
        fam_b: 42,
      });
      for (const id of ['sess_a', 'sess_b']) writer.writeRow({ what: 'session', change: session(id, 1) });
      await flush();
      if (takenOver)
        await pool.query(
          `UPDATE metis_session_leases SET node_id = 'node-b', token = nextval('metis_lease_tokens')
          WHERE session_id = 'fam_b'`,
        );
      loseNextCommit();
      const events = [bus.emit(turnStarted('sess_a'))!, bus.emit(turnStarted('sess_b'))!];
      writer.writeRow(spend('sess_a', 0.5));
      writer.writeRow(spend('sess_b', 0.5));
      const outcomes = await outcomesOf(writer, events);
      await flush();
      expect(writer.stats.retries).toBe(1);
      expect(outcomes).toEqual(['committed', takenOver ? 'METIS_ERR_SESSION_ELSEWHERE' : 'committed']);
      expect(fenced).toEqual(takenOver ? [['fam_b']] : []);
      // Stored once: the retry found the batch's mark and wrote nothing again.
      expect(
        (await pool.query("SELECT id, spent_usd FROM sessions WHERE id LIKE 'sess_%' ORDER BY id")).rows,
      ).toEqual([
        { id: 'sess_a', spent_usd: 0.5 },
        { id: 'sess_b', spent_usd: takenOver ? 0 : 0.5 },
      ]);
      expect(
        (await pool.query("SELECT session_id FROM events WHERE type = 'turn.started' ORDER BY 1")).rows,
      ).toEqual(
        takenOver ? [{ session_id: 'sess_a' }] : [{ session_id: 'sess_a' }, { session_id: 'sess_b' }],
      );
    },
  );
});
