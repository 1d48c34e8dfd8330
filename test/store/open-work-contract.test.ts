import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { defineTool, type Tool } from '../../src/core/runtime/tools/tool.js';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { type OpenWork, SqliteOpenWork } from '../../src/core/store/open-work.js';
import { PgOpenWork } from '../../src/core/store/postgres/pg-open-work.js';
import { crash, hangs, openStrict } from '../helpers/crash-reopen.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { eventually } from '../helpers/protocol.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import {
  copiedToPostgres,
  keepStore,
  openPair,
  pointsOf,
  repeatToolUseId,
  type StorePair,
} from '../helpers/store-pair.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * The open work a stopped process leaves (open-work.ts) reads the same on both stores
 * (docs/plans/store-port.md, step 7): a runtime is "crashed" mid-work on a real SQLite file, the file
 * is copied into PostgreSQL, and every question recovery asks is asked of both.
 */

const server = postgresForFile();

/** Asks for confirmation first (execute: ask), so its row stays pending until the crash. */
const asks: Tool = defineTool({
  name: 'asks',
  description: 'runs something, once allowed',
  inputSchema: z.strictObject({}),
  sideEffects: 'execute',
  async execute() {
    return { content: 'ran' };
  },
});

/**
 * A store as a crash leaves it: ended turns; a session resumed by a later process; a planner's turn and
 * its worker's cut mid-tool (rows running); a turn waiting on a confirmation (its row pending).
 */
async function crashedStore(): Promise<string> {
  const dbPath = join(tempDir(), 'metis.db');
  const config = testRuntimeConfig({
    tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
  });
  const earlier = openStrict(dbPath);
  const before = createRuntime({ bus: earlier.bus, store: earlier.port, config, tools: [hangs, asks] });
  const planner = before.createSession({ workspacePath: tempDir() });
  await before.submitTurn(planner.id, 'think: first');
  await before.currentTurn(planner.id)?.done;
  await earlier.flush();
  crash(earlier);

  const later = openStrict(dbPath);
  const runtime = createRuntime({ bus: later.bus, store: later.port, config, tools: [hangs, asks] });
  runtime.submitTurn(planner.id, 'delegate: client: hang');
  const asking = runtime.createSession({ workspacePath: tempDir() });
  await runtime.submitTurn(asking.id, 'hello');
  await runtime.currentTurn(asking.id)?.done;
  runtime.submitTurn(asking.id, 'client: asks');
  const statuses = () =>
    later.db.prepare('SELECT status FROM tool_calls ORDER BY row_id').pluck().all() as string[];
  const cut = () => statuses().filter((status) => status === 'running').length >= 2;
  const held = () => runtime.confirmations.pendingIn(asking.id).length === 1;
  expect(await eventually(() => cut() && held(), 10_000)).toBe(true);
  await later.flush();
  crash(later);
  return dbPath;
}

/**
 * A session whose costs a float sum in another order, or in decimal, rounds differently from SQLite's
 * sum() (0.1 + 0.2 + 0.3), with a worker's cost stored as text.
 */
function insertCostedSession(db: Db): void {
  db.prepare("INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('sess_costs', 0, 0)").run();
  const insert = db.prepare(
    `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
     VALUES ('sess_costs', ?, ?, 1700000000000000, 'turn_costs', NULL, ?, 'system', 'internal', ?)`,
  );
  const nextUlid = monotonicFactory();
  const costs: [string, string][] = [
    ['llm.call_completed', '{"cost_usd":0.1}'],
    ['llm.call_completed', '{"cost_usd":0.2}'],
    ['delegate.completed', '{"worker_total_cost_usd":"0.3"}'],
    ['llm.call_completed', '{"cost_usd":0.3}'],
    ['delegate.failed', '{"reason":"no cost recorded"}'],
  ];
  for (const [n, [type, payload]] of costs.entries()) insert.run(`evt_${nextUlid()}`, n + 1, type, payload);
}

/**
 * A session with more messages than SqliteOpenWork looks through (its newest 200): the older turn's
 * first messages are beyond them, and an adapter must leave them out alike.
 */
function insertLongSession(db: Db): void {
  db.prepare("INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('sess_long', 0, 0)").run();
  const insert = db.prepare(
    `INSERT INTO messages (id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us)
     VALUES (?, 'sess_long', ?, 'user', '[{"type":"text","text":"again"}]', 'complete', NULL, NULL, ?)`,
  );
  const nextUlid = monotonicFactory();
  for (let n = 0; n < 205; n += 1) insert.run(`msg_${nextUlid()}`, n < 10 ? 'turn_older' : 'turn_newer', n);
}

describe.runIf(postgresTestsRun)('OpenWork on SQLite and on PostgreSQL answer the same', () => {
  let dir: string;
  let dbPath: string;
  let url: string;
  let pair: StorePair | undefined;
  let sqlite: OpenWork;
  let postgres: OpenWork;
  let sessionIds: string[];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-open-work-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a crashed runtime leaves open work, copied into PostgreSQL with its archived streaming events', async () => {
    dbPath = keepStore(await crashedStore(), dir);
    // A server archives deltas (stream-archive.ts), a bare runtime does not, and copyStore leaves the
    // archive out: the same rows go into both stores here.
    const writable = openDatabase(dbPath);
    insertCostedSession(writable);
    insertLongSession(writable);
    sessionIds = writable
      .prepare("SELECT id FROM sessions WHERE id <> 'system' ORDER BY id")
      .pluck()
      .all() as string[];
    const nextUlid = monotonicFactory();
    const archived = sessionIds.flatMap((sessionId) =>
      Array.from({ length: 6 }, (_, n) => {
        const id = `evt_${nextUlid()}`;
        return { sessionId, id, timestampUs: 1_700_000_000_000_000 + n, json: `{"id":"${id}","n":${n}}` };
      }),
    );
    const insert = writable.prepare(
      'INSERT INTO stream_events (session_id, id, timestamp_us, event_json) VALUES (?, ?, ?, ?)',
    );
    for (const row of archived) insert.run(row.sessionId, row.id, row.timestampUs, row.json);
    const repeated = repeatToolUseId(writable);
    const statuses = writable.prepare('SELECT DISTINCT status FROM tool_calls').pluck().all();
    const resumed = writable
      .prepare("SELECT count(*) FROM events WHERE type = 'session.resumed'")
      .pluck()
      .get();
    writable.close();
    expect(statuses).toEqual(expect.arrayContaining(['pending', 'running']));
    expect(resumed).toBeGreaterThan(0);
    expect(repeated).toBeTruthy();

    url = await copiedToPostgres(dbPath, server);
    pair = openPair(dbPath, url);
    await pair.pool.query(
      `INSERT INTO stream_events (session_id, id, timestamp_us, event_json)
       SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])`,
      [
        archived.map((row) => row.sessionId),
        archived.map((row) => row.id),
        archived.map((row) => row.timestampUs),
        archived.map((row) => row.json),
      ],
    );
    sqlite = new SqliteOpenWork(pair.db);
    postgres = new PgOpenWork(pair.pool);
    expect(sessionIds.length).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it('open turns, their events, and the sessions with open tool calls', async () => {
    const turns = await sqlite.openTurns();
    expect(turns.length).toBeGreaterThanOrEqual(3);
    expect(await postgres.openTurns()).toEqual(turns);
    const turnIds = pair!.db
      .prepare('SELECT DISTINCT turn_id FROM events WHERE turn_id IS NOT NULL ORDER BY turn_id')
      .pluck()
      .all() as string[];
    expect(turnIds.length).toBeGreaterThan(turns.length);
    for (const turnId of [...turnIds, 'turn_none'])
      expect(await postgres.turnEvents(turnId), turnId).toEqual(await sqlite.turnEvents(turnId));
    const bySession = (rows: { session_id: string }[]) =>
      [...rows].sort((a, b) => (a.session_id < b.session_id ? -1 : 1));
    const open = bySession(await sqlite.sessionsWithOpenToolCalls());
    expect(open.length).toBeGreaterThanOrEqual(3);
    expect(bySession(await postgres.sessionsWithOpenToolCalls())).toEqual(open);
  });

  it("limited to a family's sessions (a take-over): the whole store's answers for those sessions alone", async () => {
    const turns = await sqlite.openTurns();
    const open = await sqlite.sessionsWithOpenToolCalls();
    const scopes = [...sessionIds.map((id) => [id]), sessionIds.slice(0, 2), ['sess_none'], []];
    let found = 0;
    for (const only of scopes) {
      const scoped = new PgOpenWork(pair!.pool, only);
      const inScope = (row: { session_id: string }) => only.includes(row.session_id);
      expect(await scoped.openTurns(), only.join()).toEqual(turns.filter(inScope));
      expect(await scoped.sessionsWithOpenToolCalls(), only.join()).toEqual(
        open.filter(inScope).sort((a, b) => (a.session_id < b.session_id ? -1 : 1)),
      );
      found += (await scoped.openTurns()).length;
    }
    expect(found).toBeGreaterThan(0);
  });

  it('per session: row, cost, turn count, restarts since each point, turn messages', async () => {
    let costed = 0;
    let numbered = 0;
    for (const sessionId of [...sessionIds, 'sess_none']) {
      expect(await postgres.session(sessionId), sessionId).toEqual(await sqlite.session(sessionId));
      const cost = await sqlite.storedCost(sessionId);
      expect(await postgres.storedCost(sessionId), sessionId).toBe(cost);
      if (cost > 0) costed += 1;
      expect(await postgres.turnCount(sessionId), sessionId).toBe(await sqlite.turnCount(sessionId));
      const lastSeq = await sqlite.lastSeq(sessionId);
      expect(await postgres.lastSeq(sessionId), sessionId).toBe(lastSeq);
      if (lastSeq > 0) numbered += 1;
      const ids = pair!.db
        .prepare('SELECT id FROM events WHERE session_id = ? ORDER BY id')
        .pluck()
        .all(sessionId) as string[];
      for (const point of pointsOf(ids))
        expect(await postgres.resumedSince(sessionId, point)).toBe(
          await sqlite.resumedSince(sessionId, point),
        );
      const turnIds = pair!.db
        .prepare('SELECT DISTINCT turn_id FROM messages WHERE session_id = ?')
        .pluck()
        .all(sessionId) as string[];
      for (const turnId of [...turnIds, 'turn_none'])
        expect(await postgres.turnMessages(sessionId, turnId)).toEqual(
          await sqlite.turnMessages(sessionId, turnId),
        );
    }
    expect(costed).toBeGreaterThanOrEqual(3);
    expect(numbered).toBeGreaterThanOrEqual(3);
  });

  it('tool calls by id, open and closed, and archived streaming events after each point', async () => {
    const calls = pair!.db.prepare('SELECT id, session_id FROM tool_calls').all() as {
      id: string;
      session_id: string;
    }[];
    for (const call of [...calls, { id: 'toolu_none', session_id: sessionIds[0]! }]) {
      const row = await sqlite.toolCall(call.id, call.session_id);
      expect(await postgres.toolCall(call.id, call.session_id), call.id).toEqual(row);
    }
    let archived = 0;
    for (const sessionId of [...sessionIds, 'sess_none']) {
      const ids = pair!.db
        .prepare('SELECT id FROM stream_events WHERE session_id = ? ORDER BY id')
        .pluck()
        .all(sessionId) as string[];
      for (const point of pointsOf(ids))
        for (const limit of [1, 3, 100]) {
          const rows = await sqlite.archivedAfter(sessionId, point, limit);
          expect(await postgres.archivedAfter(sessionId, point, limit), `${sessionId} ${point}`).toEqual(
            rows,
          );
          archived += rows.length;
        }
    }
    expect(archived).toBeGreaterThan(0);
  });
});
