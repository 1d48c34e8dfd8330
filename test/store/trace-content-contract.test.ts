import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { pgTraceContentReads } from '../../src/core/store/postgres/pg-trace-content-reads.js';
import { sqliteTraceContentReads, type TraceContentReads } from '../../src/core/store/trace-content-rows.js';
import { TraceStore } from '../../src/core/store/trace-store.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import {
  copiedToPostgres,
  keepStore,
  openPair,
  pointsOf,
  repeatToolUseId,
  type StorePair,
} from '../helpers/store-pair.js';
import { writtenStore } from '../helpers/written-store.js';

/**
 * The trace page's reads (trace-content-rows.ts) answer the same on both stores
 * (docs/plans/store-port.md, step 7): a store a real server wrote, with a delegation, tool calls,
 * feedback and an eval verdict, is copied into PostgreSQL and every read is asked of both.
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('TraceContentReads on SQLite and on PostgreSQL answer the same', () => {
  let dir: string;
  let pair: StorePair | undefined;
  let sqlite: TraceContentReads;
  let postgres: TraceContentReads;
  let sessionIds: string[];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-trace-content-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a server writes the store, scored, which is copied into PostgreSQL', async () => {
    const written = await writtenStore(async (t, [first, second]) => {
      const turnId = await t.submit(first, 'hello again');
      await t.runtime.currentTurn(first)?.done;
      for (const body of [
        { rating: 'thumbs_up', turn_id: turnId, comment: 'good' },
        { rating: 'thumbs_down' },
      ])
        expect((await t.request('POST', `/sessions/${first}/feedback`, body)).status).toBe(201);
      // The verdict on the ended session comes after its end, from the evaluator.
      const verdict = () =>
        t.context.db
          .prepare("SELECT 1 FROM events WHERE type = 'eval.completed' AND session_id = ?")
          .get(second) !== undefined;
      for (let waited = 0; !verdict() && waited < 10_000; waited += 20) await sleep(20);
      await t.context.flush();
    });
    const dbPath = keepStore(written, dir);
    const writable = openDatabase(dbPath);
    repeatToolUseId(writable);
    writable.close();
    pair = openPair(dbPath, await copiedToPostgres(dbPath, server));
    sqlite = sqliteTraceContentReads(new TraceStore(pair.db));
    postgres = pgTraceContentReads(pair.pool);
    sessionIds = pair.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    const types = new Set(pair.db.prepare('SELECT DISTINCT type FROM events').pluck().all());
    for (const type of ['delegate.started', 'tool.called', 'feedback.explicit', 'eval.completed'])
      expect(types, type).toContain(type);
  }, 120_000);

  it('replay: the same events, from the start and from a cursor, filtered, capped', async () => {
    const ids = pair!.db.prepare('SELECT id FROM events ORDER BY id').pluck().all() as string[];
    const mid = ids[Math.floor(ids.length / 2)]!;
    let capped = 0;
    for (const afterId of [null, ids[0]!, mid, `${mid}0`, ids.at(-1)!])
      for (const limit of [1, 5, 10_000])
        for (const query of [
          { sessionIds: [sessionIds[0]!], afterId, limit },
          { sessionIds, afterId, limit },
          { sessionIds, afterId, limit, eventTypes: ['turn.started', 'tool.called'] },
          { sessionIds, afterId, limit, actors: ['user' as const] },
        ]) {
          const left = await sqlite.replay(query);
          expect(await postgres.replay(query), JSON.stringify(query)).toEqual(left);
          if (left.tooLarge) capped += 1;
        }
    expect(capped).toBeGreaterThan(0);
  });

  it("each turn's records, and messages before each point", async () => {
    const turns = pair!.db
      .prepare('SELECT DISTINCT session_id, turn_id FROM events WHERE turn_id IS NOT NULL ORDER BY turn_id')
      .all() as { session_id: string; turn_id: string }[];
    let toolCalls = 0;
    for (const { session_id, turn_id } of [...turns, { session_id: sessionIds[0]!, turn_id: 'turn_none' }]) {
      const left = await sqlite.turnRecords(session_id, turn_id);
      const right = await postgres.turnRecords(session_id, turn_id);
      expect(right, turn_id).toEqual(left);
      expect([...right.toolCalls.keys()], turn_id).toEqual([...left.toolCalls.keys()]);
      toolCalls += left.toolCalls.size;
    }
    expect(toolCalls).toBeGreaterThan(0);
    // Points at events' ULIDs and at messages' own (a message's id is msg_ and a ULID of its own).
    const ids = pair!.db
      .prepare('SELECT id FROM events UNION ALL SELECT id FROM messages ORDER BY 1')
      .pluck()
      .all() as string[];
    const ulids = ids.map((id) => id.slice(id.indexOf('_') + 1)).sort();
    for (const sessionId of sessionIds)
      for (const ulid of pointsOf(ulids))
        expect(await postgres.messagesBefore(sessionId, ulid), `${sessionId} ${ulid}`).toBe(
          await sqlite.messagesBefore(sessionId, ulid),
        );
  });

  it('the delegating tool call of each session, and its scores', async () => {
    let workers = 0;
    let scored = 0;
    for (const sessionId of [...sessionIds, 'sess_none']) {
      const call = await sqlite.delegatingToolCall(sessionId);
      expect(await postgres.delegatingToolCall(sessionId), sessionId).toBe(call);
      if (call !== null) workers += 1;
      const scores = await sqlite.scoreEvents(sessionId);
      expect(await postgres.scoreEvents(sessionId), sessionId).toEqual(scores);
      scored += scores.length;
    }
    expect(workers).toBeGreaterThan(0);
    expect(scored).toBeGreaterThanOrEqual(3);
  });
});
