import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { pgTraceQueryReads } from '../../src/core/store/postgres/pg-trace-query.js';
import { sqliteTraceQueryReads, type TraceQueryReads } from '../../src/core/store/trace-query-reads.js';
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
 * A plugin's asynchronous trace reads (`TraceQuery.async`, trace-query-reads.ts) answer the same on both
 * stores: a store a real server wrote (a delegation, tool calls, a confirmation) is copied into
 * PostgreSQL and every read is asked of both, at every stored id and between them.
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('TraceQueryReads on SQLite and on PostgreSQL answer the same', () => {
  let dir: string;
  let pair: StorePair | undefined;
  let sqlite: TraceQueryReads;
  let postgres: TraceQueryReads;
  let sessionIds: string[];
  let eventIds: string[];
  let repeated: string;
  let pgUrl: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-trace-query-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a server writes the store, which is copied into PostgreSQL', async () => {
    const dbPath = keepStore(await writtenStore(), dir);
    const writable = openDatabase(dbPath);
    repeated = repeatToolUseId(writable);
    writable.close();
    pgUrl = await copiedToPostgres(dbPath, server);
    pair = openPair(dbPath, pgUrl);
    sqlite = sqliteTraceQueryReads(new TraceStore(pair.db));
    postgres = pgTraceQueryReads(pair.pool);
    sessionIds = pair.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    eventIds = pair.db.prepare('SELECT id FROM events ORDER BY id').pluck().all() as string[];
    expect(sessionIds.length).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it('replay and sessionEvents: the same events, in id order', async () => {
    const mid = eventIds[Math.floor(eventIds.length / 2)]!;
    let capped = 0;
    for (const afterId of [null, mid, eventIds.at(-1)!])
      for (const limit of [3, 10_000])
        for (const query of [
          { sessionIds: [sessionIds[0]!], afterId, limit },
          { sessionIds, afterId, limit, eventTypes: ['turn.started', 'tool.called'] },
        ]) {
          const left = await sqlite.replay(query);
          expect(await postgres.replay(query), JSON.stringify(query)).toEqual(left);
          if (left.tooLarge) capped += 1;
        }
    expect(capped).toBeGreaterThan(0);
    for (const sessionId of [...sessionIds, 'sess_none']) {
      const left = await sqlite.sessionEvents(sessionId);
      expect(await postgres.sessionEvents(sessionId), sessionId).toEqual(left);
    }
  });

  it('getEvent and causalChain of every stored id, and of ids not stored', async () => {
    let longest = 0;
    for (const id of [...eventIds, 'evt_none', `${eventIds[0]}0`]) {
      expect(await postgres.getEvent(id), id).toEqual(await sqlite.getEvent(id));
      const chain = await sqlite.causalChain(id);
      expect(await postgres.causalChain(id), id).toEqual(chain);
      longest = Math.max(longest, chain.length);
    }
    // Chains of several links were compared, not only roots.
    expect(longest).toBeGreaterThanOrEqual(3);
  });

  it('messagesBefore at every point, at several limits, and toolCall of every tool_use_id', async () => {
    const points = pointsOf(eventIds).filter((id) => id.startsWith('evt_'));
    let seen = 0;
    for (const sessionId of sessionIds)
      for (const point of points)
        for (const limit of [1, 50]) {
          const left = await sqlite.messagesBefore(sessionId, point, limit);
          expect(await postgres.messagesBefore(sessionId, point, limit), `${sessionId} ${point}`).toEqual(
            left,
          );
          seen += left.length;
        }
    expect(seen).toBeGreaterThan(0);
    const calls = pair!.db.prepare('SELECT DISTINCT session_id, id FROM tool_calls').all() as {
      session_id: string;
      id: string;
    }[];
    expect(calls.length).toBeGreaterThan(0);
    for (const { session_id, id } of [...calls, { session_id: sessionIds[0]!, id: 'tu_none' }])
      expect(await postgres.toolCall(session_id, id), id).toEqual(await sqlite.toolCall(session_id, id));
    // The repeated tool_use_id answers its newest row on both.
    const owner = calls.find((call) => call.id === repeated)!;
    expect((await postgres.toolCall(owner.session_id, repeated))?.error_class).toBe('repeated');
  });

  it("each PostgreSQL read but replay (the stream's own, planned elsewhere) runs on an index", async () => {
    const client = new pg.Client({ connectionString: pgUrl });
    await client.connect();
    onTestFinished(() => client.end());
    // With sequential scans priced out, a plan that still has one has no index to use.
    await client.query('SET enable_seqscan = off');
    const plans: string[] = [];
    const explaining = {
      query: async (config: pg.QueryConfig) => {
        const { text, values } = config;
        const result = await client.query({ text: `EXPLAIN ${text}`, values });
        plans.push(result.rows.map((row) => row['QUERY PLAN']).join('\n'));
        return { rows: [], rowCount: 0 };
      },
    } as unknown as pg.Pool;
    const reads = pgTraceQueryReads(explaining);
    await reads.sessionEvents(sessionIds[0]!);
    await reads.getEvent(eventIds[0]!);
    await reads.causalChain(eventIds.at(-1)!);
    await reads.messagesBefore(sessionIds[0]!, eventIds.at(-1)!, 50);
    await reads.toolCall(sessionIds[0]!, 'tu_1');
    expect(plans).toHaveLength(5);
    for (const plan of plans) expect(plan).not.toContain('Seq Scan');
    // The index is searched by the read's key (an Index Cond), not read whole under a Filter.
    expect(plans[0]).toMatch(/using events_pkey on events .*\n\s+Index Cond: \(session_id = /);
    expect(plans[1]).toMatch(/using idx_events_id on events .*\n\s+Index Cond: \(id = /);
    expect(plans[2]).toMatch(/using idx_events_id on events e .*\n\s+Index Cond: \(id = chain_1\.id\)/);
    expect(plans[3]).toMatch(
      /using idx_messages_session on messages .*\n\s+Index Cond: \(\(session_id = .* AND \(id < /,
    );
    expect(plans[4]).toMatch(
      /using idx_tool_calls_(session|key) on tool_calls .*\n\s+Index Cond: \(\(session_id = .* AND \(id = /,
    );
  });
});
