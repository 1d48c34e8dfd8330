import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { purgePostgres } from '../../src/core/store/postgres/pg-prune.js';
import {
  EVENT_BEFORE_SQL,
  pgStreamReads,
  replayStatement,
} from '../../src/core/store/postgres/pg-stream-reads.js';
import { readInIdOrder } from '../../src/core/store/postgres/pg-util.js';
import { purgeOldEvents, retentionCutoffUs } from '../../src/core/store/retention.js';
import type { CountedCost } from '../../src/core/store/session-as-of.js';
import { COST_EVENT_TYPES, SessionStore } from '../../src/core/store/session-store.js';
import { type StreamReads, sqliteStreamReads } from '../../src/core/store/stream-reads.js';
import { type ReplayQuery, TraceStore } from '../../src/core/store/trace-store.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { loadOldEvents } from '../helpers/pg-old-events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { copiedToPostgres, keepStore, openPair, pointsOf, type StorePair } from '../helpers/store-pair.js';
import { writtenStore } from '../helpers/written-store.js';

/**
 * The stream's reads (stream-reads.ts) answer the same on both stores (docs/plans/store-port.md, step 7):
 * a store a real server wrote is copied into PostgreSQL, and every read is asked of both, at every
 * stored event id of every session and at ids between and around them.
 */

const server = postgresForFile();

interface StoredEvent {
  readonly id: string;
  readonly session_id: string;
  readonly type: string;
  readonly payload_json: string;
}

/** What the runtime's cost accumulator counts of a stored cost event (runtime/cost-accumulator.ts). */
function amountOf(event: StoredEvent): number {
  const payload = JSON.parse(event.payload_json) as Record<string, unknown>;
  return event.type === 'llm.call_completed'
    ? (payload.cost_usd as number)
    : Number.parseFloat(String(payload.worker_total_cost_usd));
}

/**
 * The running costs a snapshot may be taken with at `atId` (session-as-of.ts costAsOf's cases): none
 * counted yet; counted up to a stored event behind the point (with spend in memory the store lacks);
 * counted past the point with the memory reaching back to it; and past it with a memory that does not.
 */
function countedVariants(costs: readonly { id: string; amount: number }[], atId: string): CountedCost[] {
  const variants: CountedCost[] = [{ costUsd: 0, upTo: null, recent: [] }];
  const total = costs.reduce((sum, entry) => sum + entry.amount, 0);
  const behind = costs.filter((entry) => entry.id <= atId);
  if (behind.length > 0)
    variants.push({
      costUsd: behind.reduce((sum, entry) => sum + entry.amount, 0) + 0.25,
      upTo: behind.at(-1)!.id,
      recent: behind.slice(-2),
    });
  if (costs.length > 0 && costs.at(-1)!.id > atId) {
    variants.push({ costUsd: total + 0.5, upTo: costs.at(-1)!.id, recent: costs });
    variants.push({
      costUsd: total + 0.5,
      upTo: costs.at(-1)!.id,
      recent: costs.filter((entry) => entry.id > atId),
    });
    variants.push({ costUsd: total, upTo: `${costs.at(-1)!.id}~`, recent: [] });
  }
  return variants;
}

describe.runIf(postgresTestsRun)('StreamReads on SQLite and on PostgreSQL answer the same', () => {
  let dbPath: string;
  let url: string;
  let db: Db;
  let pool: pg.Pool | undefined;
  let sqlite: StreamReads;
  let postgres: StreamReads;
  let events: StoredEvent[];
  let sessionIds: string[];

  let pair: StorePair | undefined;
  const openBoth = () => {
    pair = openPair(dbPath, url);
    ({ db, pool } = pair);
    const sessions = new SessionStore(db);
    sqlite = sqliteStreamReads(new TraceStore(db), sessions);
    postgres = pgStreamReads(pool, sessions);
    events = db
      .prepare('SELECT id, session_id, type, payload_json FROM events ORDER BY id')
      .all() as StoredEvent[];
    sessionIds = [...new Set(events.map((event) => event.session_id))].sort();
  };
  const closeBoth = async () => {
    await pair?.close();
    pair = undefined;
  };

  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-stream-reads-'));
  });
  afterAll(async () => {
    await closeBoth();
    rmSync(dir, { recursive: true, force: true });
  });

  // A test, not a hook: the test server and its folder live as long as the test that starts them, so
  // the store is moved out of its folder for the tests after this one.
  it('a server writes the store, which is copied into PostgreSQL', async () => {
    dbPath = keepStore(await writtenStore(), dir);
    const writable = openDatabase(dbPath);
    const [realSession] = writable
      .prepare("SELECT id FROM sessions WHERE id <> 'system' AND parent_session_id IS NULL ORDER BY id")
      .pluck()
      .all() as string[];
    // Old events, for the prune: some before a real session's, and a session that is all old.
    insertOldEvents(writable, { sessionId: realSession!, ageDays: 100, count: 12, type: 'text.delta' });
    insertOldEvents(writable, { sessionId: 'sess_old', ageDays: 90, count: 20 });
    // Two workers of the delegation's worker, made out of id order: the lineage's levels go by id.
    const [worker] = writable
      .prepare('SELECT id FROM sessions WHERE parent_session_id IS NOT NULL ORDER BY id')
      .pluck()
      .all() as string[];
    for (const id of ['sess_zz_grand', 'sess_aa_grand'])
      writable
        .prepare(
          'INSERT INTO sessions (id, parent_session_id, created_at_us, updated_at_us) VALUES (?, ?, 0, 0)',
        )
        .run(id, worker);
    // Text both encoders must escape alike, and timestamps only rowToJson formats (before 1970, past 9999).
    writable
      .prepare('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)')
      .run('sess_odd');
    const odd = writable.prepare(
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES ('sess_odd', ?, ?, ?, ?, ?, 'text.delta', 'agent', 'private', '{"text":"\\u0000"}')`,
    );
    const nextUlid = monotonicFactory();
    const oddIds = Array.from({ length: 5 }, () => `evt_${nextUlid()}`);
    const text = 'tab\there "quoted" \\ \u0001\u001f\u007f\u2028é🙂';
    odd.run(oddIds[0], 1, Date.now() * 1000, text, null);
    odd.run(oddIds[1], 2, -1_500_000, null, text);
    odd.run(oddIds[2], 3, 0, 'turn_odd', oddIds[1]);
    odd.run(oddIds[3], 4, 10_000_000_000_000_000, 'turn_odd', null); // 2286: past SQLite's strftime
    odd.run(oddIds[4], 5, 253_402_300_800_000_000, 'turn_odd', null); // 10000: past PostgreSQL's to_char
    // Caps set by request on the planner and on a worker below it, for the stored budget.
    const caps = (usd: number) =>
      JSON.stringify({ session: { usd, tokens: null }, tree: { usd: usd * 10, tokens: 500 } });
    writable.prepare('UPDATE sessions SET budget_caps_json = ? WHERE id = ?').run(caps(1.5), worker);
    writable
      .prepare(
        'UPDATE sessions SET budget_caps_json = ? WHERE id = (SELECT parent_session_id FROM sessions WHERE id = ?)',
      )
      .run(caps(2), worker);
    writable.close();
    url = await copiedToPostgres(dbPath, server);
    openBoth();
    const types = new Set(events.map((event) => event.type));
    for (const type of [
      'turn.started',
      'turn.completed',
      'llm.call_completed',
      'delegate.completed',
      'tool.confirmation_requested',
      'tool.confirmation_resolved',
    ])
      expect(types, type).toContain(type);
    expect(sessionIds.length).toBeGreaterThanOrEqual(4);
  }, 120_000);

  it('lineage: every session with its workers and theirs, level by level, the same on both stores', async () => {
    const parentOf = new Map(
      (
        await pool!.query<{ id: string; parent: string | null }>(
          'SELECT id, parent_session_id AS parent FROM sessions',
        )
      ).rows.map((row) => [row.id, row.parent]),
    );
    for (const id of [...parentOf.keys(), 'sess_unknown'])
      expect(await postgres.lineage(id), id).toEqual(await sqlite.lineage(id));
    expect(await sqlite.lineage('sess_unknown')).toEqual([]);
    const worker = parentOf.get('sess_aa_grand')!;
    const planner = parentOf.get(worker)!;
    expect(await sqlite.lineage(planner)).toEqual([
      { id: planner, parent_session_id: null },
      { id: worker, parent_session_id: planner },
      { id: 'sess_aa_grand', parent_session_id: worker },
      { id: 'sess_zz_grand', parent_session_id: worker },
    ]);
  });

  it('storedBudget and unansweredConfirmations: the same on both stores, for every session', async () => {
    const ids = (await pool!.query<{ id: string }>('SELECT id FROM sessions ORDER BY id')).rows.map(
      (r) => r.id,
    );
    let capped = 0;
    let spent = 0;
    for (const id of [...ids, 'sess_unknown']) {
      const budget = await sqlite.storedBudget(id);
      expect(await postgres.storedBudget(id), id).toEqual(budget);
      if (budget?.caps !== null && budget?.caps !== undefined) capped += 1;
      if ((budget?.tree.usd ?? 0) > 0) spent += 1;
      expect(await postgres.unansweredConfirmations([id]), id).toEqual(
        await sqlite.unansweredConfirmations([id]),
      );
    }
    expect(await sqlite.storedBudget('sess_unknown')).toBeNull();
    expect(capped).toBe(2);
    expect(spent).toBeGreaterThan(0);
    // A worker's root is its planner's root, and its tree spends what the whole family did.
    const worker = (await sqlite.storedBudget('sess_aa_grand'))!;
    const root = (await sqlite.storedBudget(worker.root))!;
    expect(worker.isWorker).toBe(true);
    expect(root.isWorker).toBe(false);
    expect(worker.tree).toEqual(root.tree);
    expect(worker.rootCaps).toEqual(root.caps);
    expect(await postgres.unansweredConfirmations(ids)).toEqual(await sqlite.unansweredConfirmations(ids));
  });

  it('replayJson: byte-identical frames, from the start and from a cursor, filtered, over several sessions, capped', async () => {
    const queries: ReplayQuery[] = [];
    const mid = events[Math.floor(events.length / 2)]!.id;
    for (const afterId of [null, events[0]!.id, mid, events.at(-1)!.id, `${mid}0`])
      for (const limit of [1, 7, 10_000]) {
        for (const sessionId of sessionIds) queries.push({ sessionIds: [sessionId], afterId, limit });
        queries.push({ sessionIds, afterId, limit });
        queries.push({ sessionIds: sessionIds.slice(1, 3), afterId, limit });
        queries.push({ sessionIds: [], afterId, limit });
        queries.push({ sessionIds, afterId, limit, eventTypes: ['turn.started', 'llm.call_completed'] });
        queries.push({ sessionIds, afterId, limit, eventTypes: [] });
        queries.push({ sessionIds, afterId, limit, actors: ['user', 'tool'] });
        queries.push({ sessionIds: [sessionIds[0]!], afterId, limit, actors: ['agent'], eventTypes: null });
      }
    let frames = 0;
    let capped = 0;
    for (const query of queries) {
      const [left, right] = await Promise.all([sqlite.replayJson(query), postgres.replayJson(query)]);
      expect(right, JSON.stringify(query)).toEqual(left);
      frames += left.rows.length;
      if (left.tooLarge) capped += 1;
    }
    expect(frames).toBeGreaterThan(events.length);
    expect(capped).toBeGreaterThan(10);
  }, 60_000);

  it('eventBefore, confirmationEventsThrough and messagesAsOf at every point, one session and several', async () => {
    const points = pointsOf(events.map((event) => event.id));
    const groups = [...sessionIds.map((id) => [id]), sessionIds, sessionIds.slice(0, 2), []];
    let found = 0;
    for (const point of points)
      for (const group of groups) {
        const [before, pgBefore, confirmations, pgConfirmations] = await Promise.all([
          sqlite.eventBefore(group, point),
          postgres.eventBefore(group, point),
          sqlite.confirmationEventsThrough(group, point),
          postgres.confirmationEventsThrough(group, point),
        ]);
        expect(pgBefore, `${group} ${point}`).toBe(before);
        expect(pgConfirmations, `${group} ${point}`).toEqual(confirmations);
        if (confirmations.length > 0) found += 1;
      }
    expect(found).toBeGreaterThan(0);
    const [sessionId] = sessionIds;
    for (const point of points.slice(0, 40))
      expect(await postgres.messagesAsOf(sessionId!, point, 5)).toEqual(
        await sqlite.messagesAsOf(sessionId!, point, 5),
      );
  }, 60_000);

  it('sessionAsOf at every point, with every kind of running cost', async () => {
    let costed = 0;
    let turning = 0;
    for (const sessionId of sessionIds) {
      const own = events.filter((event) => event.session_id === sessionId);
      const costs = own
        .filter((event) => (COST_EVENT_TYPES as readonly string[]).includes(event.type))
        .map((event) => ({ id: event.id, amount: amountOf(event) }));
      for (const point of pointsOf(own.map((event) => event.id)))
        for (const counted of countedVariants(costs, point)) {
          const [left, right] = await Promise.all([
            sqlite.sessionAsOf(sessionId, point, counted),
            postgres.sessionAsOf(sessionId, point, counted),
          ]);
          expect(right, `${sessionId} ${point} ${JSON.stringify(counted)}`).toEqual(left);
          if (left.costUsd > 0) costed += 1;
          if (left.currentTurnId !== null) turning += 1;
        }
    }
    expect(costed).toBeGreaterThan(0);
    expect(turning).toBeGreaterThan(0);
  }, 60_000);

  it('retention: the same marks before a prune and after each store is pruned its own way', async () => {
    const marks = async () => {
      for (const sessionId of [...sessionIds, 'sess_none']) {
        const [left, right] = await Promise.all([sqlite.retention(sessionId), postgres.retention(sessionId)]);
        expect(right, sessionId).toEqual(left);
      }
      return sqlite.retention(sessionIds[0]!);
    };
    expect((await marks()).sweptCutoffMs).toBeNull();
    await closeBoth();
    const cutoffUs = retentionCutoffUs(30);
    await purgePostgres({ url, cutoffUs, dryRun: false, batchSize: 5 });
    await purgeOldEvents({ dbPath, days: 30, batchSize: 5, nowUs: cutoffUs + 30 * 86_400_000_000 });
    openBoth();
    expect(sessionIds).not.toContain('sess_old');
    sessionIds.push('sess_old');
    const after = await marks();
    expect(after.sweptCutoffMs).toBe(Math.floor(cutoffUs / 1000));
    expect(await postgres.retention('sess_old')).toEqual({
      sweptCutoffMs: after.sweptCutoffMs,
      oldestKept: null,
    });

    // A sweep under way (its row written, its trace.swept not yet): its rows may be gone already, so
    // PostgreSQL answers its cutoff; once a server records it, trace.swept answers again.
    const laterUs = cutoffUs + 86_400_000_000;
    await pool!.query(
      'INSERT INTO metis_retention_sweeps (sweep_id, cutoff_us, started_at_us) VALUES ($1, $2, $3)',
      ['sweep_under_way', laterUs, Date.now() * 1000],
    );
    expect((await postgres.retention(sessionIds[0]!)).sweptCutoffMs).toBe(Math.floor(laterUs / 1000));
    await pool!.query(
      "UPDATE metis_retention_sweeps SET recorded_by = 'node' WHERE sweep_id = 'sweep_under_way'",
    );
    expect((await postgres.retention(sessionIds[0]!)).sweptCutoffMs).toBe(after.sweptCutoffMs);
  }, 60_000);

  it('eventBefore and a one-session replay read a range of the primary key, not the table', async () => {
    const big = freshDatabase(server);
    await loadOldEvents(big, 20_000);
    const client = new pg.Client({ connectionString: big });
    await client.connect();
    try {
      const plan = async (text: string, values: unknown[]) =>
        (await client.query(`EXPLAIN ${text}`, values)).rows.map((row) => row['QUERY PLAN']).join('\n');
      const { rows } = await client.query(
        "SELECT id FROM events WHERE session_id = 'sess_old_5' ORDER BY id OFFSET 100 LIMIT 1",
      );
      const mid = rows[0].id as string;
      const before = await plan(EVENT_BEFORE_SQL, [['sess_old_5', 'sess_old_7', 'sess_none'], mid]);
      expect(before).toContain('Index Only Scan Backward using events_pkey');
      expect(before).not.toContain('Seq Scan');
      const replay = replayStatement({ sessionIds: ['sess_old_5'], afterId: mid, limit: 50 });
      const replayPlan = await plan(replay.text, replay.values!);
      expect(replayPlan).toContain('Index Scan using events_pkey');
      expect(replayPlan).not.toMatch(/Seq Scan|Sort/);
    } finally {
      await client.end();
    }
  }, 120_000);

  it('a whole session replays in primary-key order, where the planner left alone sorts it', async () => {
    const big = freshDatabase(server);
    await loadOldEvents(big, 20_000);
    const pool = new pg.Pool({ connectionString: big, max: 1 });
    try {
      await pool.query('ANALYZE events');
      const replay = replayStatement({ sessionIds: ['sess_old_5'], afterId: null, limit: 10_000 });
      const explain = { ...replay, text: `EXPLAIN ${replay.text}` };
      const planOf = (result: pg.QueryArrayResult) => result.rows.map((row) => row[0]).join('\n');
      // What the plan would be without readInIdOrder: a bitmap scan and a sort of every row.
      expect(planOf(await pool.query(explain))).toMatch(/Sort/);
      const ordered = planOf(await readInIdOrder(pool, explain));
      expect(ordered).toContain('Index Scan using events_pkey');
      expect(ordered).not.toMatch(/Bitmap|Sort/);
      // The setting was the transaction's own: the connection plans as before afterwards.
      expect(planOf(await pool.query(explain))).toMatch(/Sort/);
    } finally {
      await pool.end();
    }
  }, 120_000);
});
