import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import {
  type FamilyLoader,
  type FamilyState,
  type LoadedSession,
  loadedSession,
  RECENT_MESSAGES,
  RECENT_TURNS,
} from '../../src/core/store/family-state.js';
import { PgFamilyLoader } from '../../src/core/store/postgres/pg-load-family.js';
import { pgSessionReads } from '../../src/core/store/postgres/pg-session-reads.js';
import { sqliteSessionReads } from '../../src/core/store/session-reads.js';
import { SessionStore } from '../../src/core/store/session-store.js';
import { SqliteFamilyLoader } from '../../src/core/store/sqlite-load-family.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { copiedToPostgres, keepStore, openPair, type StorePair } from '../helpers/store-pair.js';
import { writtenStore } from '../helpers/written-store.js';

/**
 * What an owner loads once to run a family from memory (family-state.ts) is the same from both stores
 * (docs/plans/store-port.md, step 4): a store a real server wrote, with a grandchild worker planted
 * under its delegation, is copied into PostgreSQL and every family in it is loaded by both adapters;
 * the figures are also checked against what the server itself reported before it stopped.
 */

const server = postgresForFile();

/** What the server answered about a session while it ran (GET /sessions/{id}, .../budget). */
interface Reported {
  readonly turn_count: number;
  readonly cost_so_far_usd: number;
  readonly current_turn_id: string | null;
  readonly status: string;
  readonly budget: { readonly caps: Record<string, number>; readonly spent_usd: number };
}

const GRAND = 'sess_grand';
const GRAND_TURNS = RECENT_TURNS + 6;
const GRAND_MESSAGES = RECENT_MESSAGES + 7;
const QUEUE = {
  turns: [{ queued_id: 'q_1', mode: 'enqueue', message: 'after this', model: null, queued_at_us: 7 }],
  steers: [],
};

/**
 * A worker of `workerId` (so a grandchild of its root) with more turns than RECENT_TURNS, the last one
 * open, more messages than RECENT_MESSAGES of mixed statuses, costs whose plain float sum differs from
 * SQLite's sum() (0.1 + 0.2 + 0.3, one as a worker's text), a route decision, then an override, and an
 * open tool call. Its events are the newest of the store.
 */
function plantGrandchild(db: Db, workerId: string): void {
  db.prepare(
    `INSERT INTO sessions (id, parent_session_id, workspace_path, workspace_hash, active_model, created_at_us, updated_at_us)
     VALUES (?, ?, '/w', 'hash', 'm-active', 1, 2)`,
  ).run(GRAND, workerId);
  const nextUlid = monotonicFactory();
  const insert = db.prepare(
    `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
     VALUES ('${GRAND}', ?, ?, 1700000000000000, ?, NULL, ?, 'system', 'internal', ?)`,
  );
  let seq = 0;
  const event = (turnId: string | null, type: string, payload = '{}') =>
    insert.run(`evt_${nextUlid()}`, ++seq, turnId, type, payload);
  for (let n = 0; n < GRAND_TURNS; n += 1) {
    const turnId = `turn_g${String(n).padStart(3, '0')}`;
    event(turnId, 'turn.started');
    if (n === 3) event(turnId, 'route.decided', '{"chosen_model":"m-routed"}');
    if (n === 4) event(turnId, 'llm.call_completed', '{"cost_usd":0.1}');
    if (n === 5) event(turnId, 'llm.call_completed', '{"cost_usd":0.2}');
    if (n === 6) event(turnId, 'delegate.completed', '{"worker_total_cost_usd":"0.3"}');
    if (n === 7) event(turnId, 'route.overridden', '{"new_chosen_model":"m-override"}');
    if (n < GRAND_TURNS - 1) event(turnId, n % 2 === 0 ? 'turn.completed' : 'turn.cancelled');
  }
  const message = db.prepare(
    `INSERT INTO messages (id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us)
     VALUES (?, '${GRAND}', 'turn_g001', ?, ?, ?, NULL, NULL, ?)`,
  );
  for (let n = 0; n < GRAND_MESSAGES; n += 1)
    message.run(
      `msg_${nextUlid()}`,
      n % 2 === 0 ? 'user' : 'assistant',
      JSON.stringify([{ type: 'text', text: `m${n}` }]),
      n % 13 === 0 ? 'cancelled' : 'complete',
      n,
    );
  const call = db.prepare(
    `INSERT INTO tool_calls (id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
                             error_class, created_at_us, updated_at_us)
     VALUES (?, '${GRAND}', 'turn_g069', 'msg_x', 'read', '{"path":"a"}', ?, NULL, NULL, 1, 1)`,
  );
  call.run('call_done', 'completed');
  call.run('call_open', 'running');
  call.run('call_asked', 'pending');
}

function family(state: FamilyState | null): FamilyState {
  expect(state).not.toBeNull();
  return state!;
}

function session(state: FamilyState, id: string): LoadedSession {
  const loaded = loadedSession(state, id);
  expect(loaded, id).toBeDefined();
  return loaded!;
}

describe.runIf(postgresTestsRun)('loadFamily on SQLite and on PostgreSQL loads the same family', () => {
  let dir: string;
  let pair: StorePair | undefined;
  let sqlite: FamilyLoader;
  let postgres: FamilyLoader;
  let root: string;
  let ended: string;
  let worker: string;
  const reported = new Map<string, Reported>();

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-load-family-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a server writes the store, a grandchild is planted, and it is copied into PostgreSQL', async () => {
    const written = await writtenStore(async (t, [first, second]) => {
      expect((await t.request('POST', `/sessions/${first}/budget`, { usd: 5 })).status).toBe(200);
      [root, ended] = [first, second];
      worker = t.context.db
        .prepare('SELECT id FROM sessions WHERE parent_session_id = ?')
        .pluck()
        .get(first) as string;
      for (const id of [first, second, worker]) {
        const info = await t.request('GET', `/sessions/${id}`);
        const budget = await t.request('GET', `/sessions/${id}/budget`);
        expect([info.status, budget.status], id).toEqual([200, 200]);
        reported.set(id, { ...info.body.session, budget: budget.body.session });
      }
      await t.context.flush();
    });
    const dbPath = keepStore(written, dir);
    const writable = openDatabase(dbPath);
    plantGrandchild(writable, worker);
    writable.prepare('UPDATE sessions SET queue_json = ? WHERE id = ?').run(JSON.stringify(QUEUE), root);
    writable.close();
    pair = openPair(dbPath, await copiedToPostgres(dbPath, server));
    // copyStore leaves `system` out; a server on PostgreSQL writes it, so it is there to be refused.
    await pair.pool.query(
      "INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('system', 0, 0) ON CONFLICT DO NOTHING",
    );
    sqlite = new SqliteFamilyLoader(pair.db);
    postgres = new PgFamilyLoader(pair.pool);
    expect(worker).toBeTruthy();
  }, 120_000);

  it('every session of the store, as a root, unknown ones and `system` load alike', async () => {
    const ids = pair!.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    expect(ids).toEqual(expect.arrayContaining(['system', root, ended, worker, GRAND]));
    for (const id of [...ids, 'sess_unknown']) {
      const fromSqlite = await sqlite.loadFamily(id);
      expect(await postgres.loadFamily(id), id).toEqual(fromSqlite);
    }
  });

  it("a session's row, read by anyone, is the same on both stores (SessionReads)", async () => {
    const ids = pair!.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    const onSqlite = sqliteSessionReads(new SessionStore(pair!.db));
    const onPostgres = pgSessionReads(pair!.pool);
    for (const id of [...ids, 'sess_unknown']) {
      const row = await onSqlite.session(id);
      expect(await onPostgres.session(id), id).toEqual(row);
      expect(row === null, id).toBe(id === 'sess_unknown');
    }
    expect(await onPostgres.session(GRAND)).toMatchObject({ id: GRAND, parent_session_id: worker });
  });

  it("a session's summary (row, turn state, cost), read by anyone, is the same on both stores", async () => {
    const ids = pair!.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    const onSqlite = sqliteSessionReads(new SessionStore(pair!.db));
    const onPostgres = pgSessionReads(pair!.pool);
    for (const id of [...ids, 'sess_unknown']) {
      const summary = await onSqlite.summary(id);
      expect(await onPostgres.summary(id), id).toEqual(summary);
      expect(summary === null, id).toBe(id === 'sess_unknown');
    }
    for (const id of [root, worker, ended]) {
      const said = reported.get(id)!;
      const summary = (await onPostgres.summary(id))!;
      expect([summary.turnCount, summary.currentTurnId, summary.row.status], id).toEqual([
        said.turn_count,
        said.current_turn_id,
        said.status,
      ]);
      expect(Math.round(summary.storedCost * 1e8) / 1e8, id).toBe(said.cost_so_far_usd);
    }
    // SQLite's sum of 0.1 + 0.2 + 0.3 (one as a worker's text), and an open turn among many.
    expect(await onPostgres.summary(GRAND)).toMatchObject({
      turnCount: GRAND_TURNS,
      currentTurnId: `turn_g${String(GRAND_TURNS - 1).padStart(3, '0')}`,
      storedCost: 0.6,
    });
  });

  it('the family: root, worker, its worker, in order, with their children and newest event', async () => {
    const state = family(await postgres.loadFamily(root));
    expect(state.rootSessionId).toBe(root);
    expect(state.sessions.map((s) => s.row.id)).toEqual([root, worker, GRAND]);
    expect(state.sessions.map((s) => s.childIds)).toEqual([[worker], [GRAND], []]);
    const newest = pair!.db
      .prepare('SELECT max(id) FROM events WHERE session_id IN (?, ?, ?)')
      .pluck()
      .get(root, worker, GRAND);
    expect(state.newestEventId).toBe(newest);
    // The worker's own family is the worker and its worker; the ended session is alone.
    expect(family(await sqlite.loadFamily(worker)).sessions.map((s) => s.row.id)).toEqual([worker, GRAND]);
    const alone = family(await sqlite.loadFamily(ended));
    expect(alone.sessions.map((s) => [s.row.id, s.row.status])).toEqual([[ended, 'ended']]);
  });

  it('turn counts, current turns, costs and budgets are what the server reported', async () => {
    const loaded = [
      ...family(await postgres.loadFamily(root)).sessions,
      ...family(await postgres.loadFamily(ended)).sessions,
    ];
    for (const id of [root, worker, ended]) {
      const s = session({ rootSessionId: root, sessions: loaded, newestEventId: null }, id);
      const said = reported.get(id)!;
      expect(s.turnCount, id).toBe(said.turn_count);
      expect(s.turnCount, id).toBeGreaterThan(0);
      expect(s.currentTurnId, id).toBe(said.current_turn_id);
      expect(s.row.status, id).toBe(said.status);
      expect(Math.round(s.storedCost * 1e8) / 1e8, id).toBe(said.cost_so_far_usd);
      expect(s.spent.usd, id).toBeCloseTo(said.budget.spent_usd, 12);
      expect(s.recentTurns.length, id).toBe(s.turnCount);
      expect(s.recentTurns.every((turn) => turn.endedId !== null && turn.endedId > turn.startedId)).toBe(
        true,
      );
      expect(s.lastRoutedModel, id).not.toBeNull();
      expect(s.lastSeq, id).toBeGreaterThan(0);
    }
    expect(reported.get(root)!.cost_so_far_usd).toBeGreaterThan(0);
    const rootLoaded = session({ rootSessionId: root, sessions: loaded, newestEventId: null }, root);
    expect(rootLoaded.budgetCaps?.session).toEqual(reported.get(root)!.budget.caps);
    expect(rootLoaded.budgetCaps?.session.usd).toBe(5);
    expect(rootLoaded.queue).toEqual(QUEUE);
  });

  it('a session with more turns and messages than kept: the newest, in order; an open turn; SQLite sums', async () => {
    for (const loader of [sqlite, postgres]) {
      const grand = session(family(await loader.loadFamily(root)), GRAND);
      expect(grand.turnCount).toBe(GRAND_TURNS);
      const last = `turn_g${String(GRAND_TURNS - 1).padStart(3, '0')}`;
      expect(grand.currentTurnId).toBe(last);
      expect(grand.recentTurns.map((turn) => turn.turnId)).toEqual(
        Array.from(
          { length: RECENT_TURNS },
          (_, n) => `turn_g${String(GRAND_TURNS - RECENT_TURNS + n).padStart(3, '0')}`,
        ),
      );
      expect(grand.recentTurns.at(-1)!.endedId).toBeNull();
      expect(grand.recentTurns.slice(0, -1).every((turn) => turn.endedId! > turn.startedId)).toBe(true);
      const newestMessages = pair!.db
        .prepare('SELECT id FROM messages WHERE session_id = ? ORDER BY id')
        .pluck()
        .all(GRAND)
        .slice(-RECENT_MESSAGES);
      expect(grand.recentMessages.map((m) => m.id)).toEqual(newestMessages);
      expect(grand.recentMessages[0]!.content).toEqual([{ type: 'text', text: 'm7' }]);
      expect(grand.recentMessages.map((m) => m.status)).toContain('cancelled');
      expect(grand.storedCost).toBe(0.6);
      expect(grand.lastRoutedModel).toBe('m-override');
      expect(grand.lastSeq).toBe(GRAND_TURNS * 2 + 4);
      expect(grand.openToolCalls.map((call) => [call.id, call.status, call.input])).toEqual([
        ['call_open', 'running', { path: 'a' }],
        ['call_asked', 'pending', { path: 'a' }],
      ]);
      expect(grand.spent).toEqual({ usd: 0, tokens: 0 });
      expect(grand.budgetCaps).toBeNull();
      expect(grand.queue).toBeNull();
    }
  });

  it("walks down to a session's workers by the parent index on PostgreSQL too", async () => {
    const client = await pair!.pool.connect();
    try {
      // The copied store is small: the planner would scan it whatever the indexes; asked not to, it
      // can only avoid the scan with an index on the parent.
      await client.query('SET enable_seqscan = off');
      const plan = await client.query('EXPLAIN SELECT id FROM sessions WHERE parent_session_id = $1', [root]);
      const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
      expect(text).toContain('idx_sessions_parent');
    } finally {
      await client.query('RESET enable_seqscan');
      client.release();
    }
  });

  it('an unknown root and the `system` sentinel are no family', async () => {
    for (const loader of [sqlite, postgres]) {
      expect(await loader.loadFamily('sess_unknown')).toBeNull();
      expect(await loader.loadFamily('system')).toBeNull();
    }
    // Both stores hold a `system` row (a writer records its start there): loading it would be a family.
    expect(pair!.db.prepare("SELECT count(*) FROM sessions WHERE id = 'system'").pluck().get()).toBe(1);
    const inPostgres = await pair!.pool.query("SELECT 1 FROM sessions WHERE id = 'system'");
    expect(inPostgres.rowCount).toBe(1);
  });
});
