import { describe, expect, it } from 'vitest';
import type { BudgetRows } from '../../src/core/store/budget-rows.js';
import { loadedSession } from '../../src/core/store/family-state.js';
import { PgFamilyLoader } from '../../src/core/store/postgres/pg-load-family.js';
import { pgQueuedSessions } from '../../src/core/store/postgres/pg-session-reads.js';
import type { QueueRows, StoredQueue } from '../../src/core/store/queue-rows.js';
import type { SessionWrites } from '../../src/core/store/session-writes.js';
import { SqliteFamilyLoader } from '../../src/core/store/sqlite-load-family.js';
import { WriteOnlyBudgetRows, WriteOnlyQueueRows } from '../../src/core/store/write-only-rows.js';
import { SyncReadRefused, WriteOnlySessionRows } from '../../src/core/store/write-only-session-rows.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * The budget and queue rows a server on PostgreSQL with no working copy writes (store-port plan step
 * 8) are the rows SQLite's writer leaves for the same writes: what the next owner's family load, and
 * the next start's list of queued sessions, read back.
 */

const server = postgresForFile();

const QUEUE: StoredQueue = {
  turns: [{ queued_id: 'q_1', mode: 'enqueue', message: 'after this', model: null, queued_at_us: 7 }],
  steers: [{ turn_id: 'turn_1', queued_id: 'q_2', message: 'shorter', queued_at_us: 8 }],
};

/** Two families' worth of budget and queue writes, in the order a runtime makes them. */
function write(sessions: Pick<SessionWrites, 'createSession'>, budgets: BudgetRows, queues: QueueRows): void {
  for (const [id, parent] of [
    ['sess_a', null],
    ['sess_a_worker', 'sess_a'],
    ['sess_b', null],
  ] as const)
    sessions.createSession({
      id,
      parent_session_id: parent,
      workspace_path: '/w',
      workspace_hash: 'h',
      active_model: 'scripted:default',
      created_at_us: 1,
    });
  budgets.setCaps('sess_a', { session: { usd: 1, tokens: null }, tree: { usd: 5, tokens: 100_000 } });
  budgets.addSpend('sess_a', { usd: 0.1, tokens: 120 });
  budgets.addSpend('sess_a_worker', { usd: 0.2, tokens: 300 });
  budgets.addSpend('sess_a', { usd: 0.3, tokens: 40 });
  budgets.setCaps('sess_a', { session: { usd: 2, tokens: null }, tree: { usd: 5, tokens: 100_000 } });
  queues.setQueue('sess_a', QUEUE);
  queues.setQueue('sess_b', QUEUE);
  queues.setQueue('sess_b', null);
}

describe.runIf(postgresTestsRun)('budget and queue rows written to PostgreSQL with no working copy', () => {
  it('leave what SQLite leaves for the same writes, as a family load and a start read them', async () => {
    const sqlite = tempTraceContext();
    write(sqlite.port.sessions, sqlite.port.budgets, sqlite.port.queues);
    await sqlite.flush();

    const pg = await openPgWriter(server);
    const sink = { write: pg.writer.writeRow.bind(pg.writer), nextRowId: () => null };
    const budgets = new WriteOnlyBudgetRows(sink);
    write(new WriteOnlySessionRows(sink), budgets, new WriteOnlyQueueRows(sink, []));
    await pg.flush();

    const fromSqlite = await new SqliteFamilyLoader(sqlite.db).loadFamily('sess_a');
    const fromPostgres = await new PgFamilyLoader(pg.pool).loadFamily('sess_a');
    const figures = (id: string, family: typeof fromSqlite) => {
      const loaded = loadedSession(family!, id)!;
      return { caps: loaded.budgetCaps, spent: loaded.spent, queue: loaded.queue };
    };
    for (const id of ['sess_a', 'sess_a_worker'])
      expect(figures(id, fromPostgres), id).toEqual(figures(id, fromSqlite));
    expect(figures('sess_a', fromPostgres)).toMatchObject({
      caps: { session: { usd: 2 } },
      spent: { tokens: 160 },
      queue: QUEUE,
    });
    expect(figures('sess_a', fromPostgres).spent.usd).toBeCloseTo(0.4, 12);
    expect(await pgQueuedSessions(pg.pool)).toEqual(sqlite.port.queues.queuedSessions());
    expect(await pgQueuedSessions(pg.pool)).toEqual(['sess_a']);
    // What a start read is what the rows list; their reads are the owner's memory, never the store's.
    expect(new WriteOnlyQueueRows(sink, ['sess_a']).queuedSessions()).toEqual(['sess_a']);
    expect(() => budgets.spentByTree('sess_a')).toThrow(SyncReadRefused);
    expect(() => new WriteOnlyQueueRows(sink, []).queueOf('sess_a')).toThrow(SyncReadRefused);
  });
});
