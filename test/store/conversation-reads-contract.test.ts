import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { monotonicFactory } from 'ulid';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type ConversationReads, sqliteConversationReads } from '../../src/core/store/conversation-reads.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { pgConversationReads } from '../../src/core/store/postgres/pg-conversation-reads.js';
import { pgStreamReads } from '../../src/core/store/postgres/pg-stream-reads.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import type { MessageRecord } from '../../src/core/store/session-records.js';
import { SessionStore } from '../../src/core/store/session-store.js';
import type { SessionWrites } from '../../src/core/store/session-writes.js';
import { type StreamReads, sqliteStreamReads } from '../../src/core/store/stream-reads.js';
import { TraceStore } from '../../src/core/store/trace-store.js';
import { NO_UNSETTLED_MESSAGES } from '../../src/core/store/unsettled-messages.js';
import { WriteOnlySessionRows } from '../../src/core/store/write-only-session-rows.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { copiedToPostgres, keepStore, openPair, pointsOf, type StorePair } from '../helpers/store-pair.js';
import { tempTraceContext } from '../helpers/tmp.js';
import { writtenStore } from '../helpers/written-store.js';

/**
 * A session's conversation as routes page through it (ConversationReads) and as a snapshot shows it
 * (StreamReads.messagesAsOf) answers the same on SQLite and on PostgreSQL (docs/plans/store-port.md
 * step 8): over a store a real server wrote, and over messages written through each store's writer,
 * some of them not committed yet (the owner's unsettled messages, merged in on both).
 */

const server = postgresForFile();

/** Each read both stores answer, at every point of `ids` (and around them), for these sessions. */
async function expectSameAnswers(
  sqlite: { conversations: ConversationReads; messagesAsOf: StreamReads['messagesAsOf'] },
  postgres: { conversations: ConversationReads; messagesAsOf: StreamReads['messagesAsOf'] },
  sessionIds: readonly string[],
  messageIds: readonly string[],
  markIds: readonly string[],
): Promise<{ pages: number; asOf: number }> {
  let pages = 0;
  let asOf = 0;
  for (const sessionId of [...sessionIds, 'sess_none']) {
    for (const beforeId of [null, ...pointsOf(messageIds), 'msg_', 'msg_~'])
      for (const limit of [1, 3, 10, 500]) {
        const page = { beforeId, limit };
        const left = await sqlite.conversations.messages(sessionId, page);
        expect(
          await postgres.conversations.messages(sessionId, page),
          `${sessionId} ${beforeId} ${limit}`,
        ).toEqual(left);
        if (left.length > 0) pages += 1;
      }
    for (const messageId of [...messageIds, 'msg_none'])
      expect(await postgres.conversations.hasMessage(sessionId, messageId), `${sessionId} ${messageId}`).toBe(
        await sqlite.conversations.hasMessage(sessionId, messageId),
      );
    for (const atId of pointsOf(markIds))
      for (const limit of [1, 5, 50]) {
        const left = await sqlite.messagesAsOf(sessionId, atId, limit);
        expect(await postgres.messagesAsOf(sessionId, atId, limit), `${sessionId} ${atId} ${limit}`).toEqual(
          left,
        );
        if (left.length > 0) asOf += 1;
      }
  }
  return { pages, asOf };
}

describe.runIf(postgresTestsRun)('ConversationReads on a server-written store, SQLite and PostgreSQL', () => {
  let dir: string;
  let pair: StorePair | undefined;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'metis-conversation-reads-'));
  });
  afterAll(async () => {
    await pair?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('pages, hasMessage and messagesAsOf answer the same at every point', async () => {
    const dbPath = keepStore(await writtenStore(), dir);
    pair = openPair(dbPath, await copiedToPostgres(dbPath, server));
    const sessions = new SessionStore(pair.db);
    const sqlite = {
      conversations: sqliteConversationReads(sessions),
      messagesAsOf: sqliteStreamReads(new TraceStore(pair.db), sessions).messagesAsOf,
    };
    const postgres = {
      conversations: pgConversationReads(pair.pool, NO_UNSETTLED_MESSAGES),
      messagesAsOf: pgStreamReads(pair.pool, NO_UNSETTLED_MESSAGES).messagesAsOf,
    };
    const sessionIds = pair.db.prepare('SELECT id FROM sessions ORDER BY id').pluck().all() as string[];
    const messageIds = pair.db.prepare('SELECT id FROM messages ORDER BY id').pluck().all() as string[];
    const eventIds = pair.db.prepare('SELECT id FROM events ORDER BY id').pluck().all() as string[];
    expect(messageIds.length).toBeGreaterThan(10);
    const found = await expectSameAnswers(sqlite, postgres, sessionIds, messageIds, eventIds.slice(0, 30));
    expect(found.pages).toBeGreaterThan(50);
    expect(found.asOf).toBeGreaterThan(10);
  }, 180_000);
});

/** A message of `sessionId` as the runtime saves one (the n-th: role, model and usage vary with n). */
function message(sessionId: string, id: string, n: number, status: MessageRecord['status']) {
  const role = (['user', 'assistant', 'tool'] as const)[n % 3]!;
  return {
    id,
    session_id: sessionId,
    turn_id: `turn_${Math.floor(n / 3)}`,
    role,
    content: [{ type: 'text', text: `message ${n} (${status})` }],
    status,
    model: role === 'assistant' ? 'scripted:demo' : null,
    usage: role === 'assistant' ? { input_tokens: n, output_tokens: 2 * n } : null,
  };
}

/** The same writes through SQLite's SessionStore and a WriteOnlySessionRows over a PgStoreWriter. */
async function writersOnBoth() {
  const context = tempTraceContext();
  await context.flush();
  // Short waits on the loop while the lock holder has the file: the writer retries off the loop.
  context.db.pragma('busy_timeout = 5');
  const sessions = new SessionStore(context.db);
  const written = await openPgWriter(server);
  const rows = new WriteOnlySessionRows({
    write: written.writer.writeRow.bind(written.writer),
    nextRowId: () => null,
  });
  const readPool = postgresPool(written.url, 'serve', 2);
  onTestFinished(() => readPool.end());
  const nextUlid = monotonicFactory();
  const messageIds: string[] = [];
  const markIds: string[] = [];
  const both = (write: (writes: SessionWrites) => void) => {
    write(sessions);
    write(rows);
  };
  for (const id of ['sess_a', 'sess_b'])
    both((writes) =>
      writes.createSession({
        id,
        workspace_path: '/w',
        workspace_hash: 'h',
        active_model: null,
        created_at_us: 1,
      }),
    );
  return {
    context,
    written,
    rows,
    readPool,
    messageIds,
    markIds,
    sqlite: {
      conversations: sqliteConversationReads(sessions),
      messagesAsOf: sqliteStreamReads(context.store, sessions).messagesAsOf,
    },
    postgres: {
      conversations: pgConversationReads(readPool, rows),
      messagesAsOf: pgStreamReads(readPool, rows).messagesAsOf,
    },
    /** Saves the n-th message on both (again, when `id` is given); `shown: false` marks it with no event. */
    save(
      sessionId: string,
      n: number,
      options: { id?: string; shown?: boolean; status?: 'complete' | 'cancelled' } = {},
    ) {
      const id = options.id ?? `msg_${nextUlid()}`;
      const mark = options.shown === false ? null : `evt_${nextUlid()}`;
      if (!messageIds.includes(id)) messageIds.push(id);
      if (mark !== null) markIds.push(mark);
      both((writes) =>
        writes.saveMessage(message(sessionId, id, n, options.status ?? 'complete'), mark, 1_000 + n),
      );
      return id;
    },
    async flush() {
      await context.flush();
      await written.flush();
    },
    async storedInPostgres(): Promise<number> {
      return (await readPool.query('SELECT count(*)::int AS n FROM messages')).rows[0].n as number;
    },
  };
}

/** A transaction of its own holding PostgreSQL's `messages` against writes (reads go on); ends with the test. */
async function lockMessages(url: string): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query('BEGIN');
  await client.query('LOCK TABLE messages IN EXCLUSIVE MODE');
  let unlocked: Promise<void> | undefined;
  const unlock = () => {
    unlocked ??= client.query('COMMIT').then(() => client.end());
    return unlocked;
  };
  onTestFinished(unlock);
  return unlock;
}

/**
 * `pool` with each query's answer held until `open()`; `answered` holds each query as PostgreSQL
 * answered it, so a test knows the query ran before it changes what the writer holds.
 */
function heldAnswers(pool: pg.Pool) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const answered: Promise<unknown>[] = [];
  const held = {
    query: (config: pg.QueryConfig) => {
      const result = pool.query(config);
      answered.push(result);
      return result.then(async (rows) => {
        await gate;
        return rows;
      });
    },
  } as unknown as pg.Pool;
  return { pool: held, answered, open };
}

describe.runIf(postgresTestsRun)('ConversationReads and messagesAsOf with messages not committed yet', () => {
  it('merge the unsettled messages and leave out those shown after the point, as SQLite does', async () => {
    const t = await writersOnBoth();
    const ofA: string[] = [];
    for (let n = 0; n < 24; n += 1) ofA.push(t.save('sess_a', n, { shown: n % 5 !== 4 }));
    for (let n = 0; n < 3; n += 1) t.save('sess_b', n);
    await t.flush();
    expect(await t.storedInPostgres()).toBe(27);
    const sessionIds = ['sess_a', 'sess_b'];
    await expectSameAnswers(t.sqlite, t.postgres, sessionIds, t.messageIds, t.markIds);

    // Storage held on both: what is written now stays with the writer, unsettled.
    const lock = await holdWriteLockInChild(t.context.dbPath, 60_000);
    const unlock = await lockMessages(t.written.url);
    const lastMarkSettled = t.markIds.at(-1)!;
    const fresh = [24, 25, 26, 27].map((n) => t.save('sess_a', n, { shown: n !== 27 }));
    t.save('sess_a', 20, { id: ofA[20]!, status: 'cancelled' });
    t.save('sess_a', 2, { id: ofA[2]!, shown: false, status: 'cancelled' });
    t.save('sess_b', 3);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await t.storedInPostgres()).toBe(27);
    expect(t.rows.unsettledMessages('sess_a')).toHaveLength(6);
    const found = await expectSameAnswers(t.sqlite, t.postgres, sessionIds, t.messageIds, t.markIds);
    expect(found.asOf).toBeGreaterThan(50);
    // What the merge must give: the new messages, and the newest writes of the two saved again.
    const newest = await t.postgres.conversations.messages('sess_a', { limit: 500 });
    expect(newest.map((m) => m.id)).toEqual([...ofA, ...fresh]);
    expect(newest.filter((m) => m.status === 'cancelled').map((m) => m.id)).toEqual([ofA[2], ofA[20]]);
    expect(await t.postgres.conversations.hasMessage('sess_a', fresh[0]!)).toBe(true);
    expect(await t.postgres.conversations.hasMessage('sess_b', fresh[0]!)).toBe(false);
    // As of the last event shown before the hold: not the messages shown since (the one saved again
    // with a new mark too), but the one shown with no event and the one saved again without a mark.
    const asOf = (await t.postgres.messagesAsOf('sess_a', lastMarkSettled, 50)).map((m) => m.id);
    expect(asOf).not.toContain(fresh[0]);
    expect(asOf).not.toContain(ofA[20]);
    expect(asOf).toContain(fresh[3]);
    expect(asOf).toContain(ofA[2]);

    await lock.release();
    await unlock();
    await t.flush();
    expect(await t.storedInPostgres()).toBe(32);
    expect(t.rows.unsettledMessages('sess_a')).toEqual([]);
    await expectSameAnswers(t.sqlite, t.postgres, sessionIds, t.messageIds, t.markIds);
  }, 120_000);

  it('a message committed while the query runs is in the answer, from the rows or from memory', async () => {
    const t = await writersOnBoth();
    await t.flush();
    const unlock = await lockMessages(t.written.url);
    const id = t.save('sess_a', 0);
    // The reads' answers are held until the message has committed and left the writer's memory.
    const late = heldAnswers(t.readPool);
    const page = pgConversationReads(late.pool, t.rows).messages('sess_a', { limit: 10 });
    const asOf = pgStreamReads(late.pool, t.rows).messagesAsOf('sess_a', 'evt_~', 10);
    await Promise.all(late.answered);
    expect(late.answered).toHaveLength(2);
    await unlock();
    await t.written.flush();
    expect(t.rows.unsettledMessages('sess_a')).toEqual([]);
    late.open();
    expect((await page).map((m) => m.id)).toEqual([id]);
    expect((await asOf).map((m) => m.id)).toEqual([id]);
  }, 60_000);

  it('a message shown after the point while the query runs leaves no hole: the page is read again, wider', async () => {
    const t = await writersOnBoth();
    const ofA = [0, 1, 2, 3, 4].map((n) => t.save('sess_a', n));
    await t.flush();
    const point = t.markIds.at(-1)!;
    const late = heldAnswers(t.readPool);
    const asOf = pgStreamReads(late.pool, t.rows).messagesAsOf('sess_a', point, 3);
    await Promise.all(late.answered);
    t.save('sess_a', 5);
    late.open();
    expect((await asOf).map((m) => m.id)).toEqual(ofA.slice(2));
    expect(await asOf).toEqual(await t.sqlite.messagesAsOf('sess_a', point, 3));
  }, 60_000);

  it("a page reads a backward range of the messages' (session_id, id) index, not the table", async () => {
    const client = new pg.Client({ connectionString: freshDatabase(server) });
    await client.connect();
    onTestFinished(() => client.end());
    await migratePostgres(client);
    await client.query(
      `INSERT INTO sessions (id, created_at_us, updated_at_us)
       SELECT 'sess_' || s, 0, 0 FROM generate_series(0, 49) s`,
    );
    await client.query(
      `INSERT INTO messages (id, session_id, turn_id, role, content_json, status, created_at_us)
       SELECT 'msg_' || lpad(n::text, 8, '0'), 'sess_' || (n % 50), NULL, 'user', '[]', 'complete', n
         FROM generate_series(1, 50000) n`,
    );
    await client.query('ANALYZE messages');
    // Each statement the reads send, planned instead of run (no rows: the pages are empty).
    const plans: string[] = [];
    const explaining = {
      query: async (config: pg.QueryConfig | string, values?: unknown[]) => {
        const { text, ...rest } = typeof config === 'string' ? { text: config, values } : config;
        const result = await client.query({ ...rest, text: `EXPLAIN ${text}` });
        plans.push(result.rows.map((row) => row['QUERY PLAN']).join('\n'));
        return { rows: [], rowCount: 0 };
      },
    } as unknown as pg.Pool;
    const conversations = pgConversationReads(explaining, NO_UNSETTLED_MESSAGES);
    await conversations.messages('sess_7', { limit: 50 });
    await conversations.messages('sess_7', { beforeId: 'msg_00025007', limit: 50 });
    await pgStreamReads(explaining, NO_UNSETTLED_MESSAGES).messagesAsOf('sess_7', 'evt_~', 50);
    await conversations.hasMessage('sess_7', 'msg_00025007');
    expect(plans).toHaveLength(4);
    for (const plan of plans.slice(0, 3)) {
      expect(plan).toContain('Index Scan Backward using idx_messages_session');
      expect(plan).not.toMatch(/Seq Scan|Sort/);
    }
    expect(plans[3]).toContain('Index Scan using messages_pkey');
  }, 60_000);
});
