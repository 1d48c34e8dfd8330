import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyRowChanges } from '../../src/core/store/postgres/pg-row-applier.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { bareSession, RowStores, type Setup } from '../helpers/row-applier-stores.js';
import { randomChangeSequences } from '../helpers/row-change-arbitrary.js';
import {
  archived,
  closeOpen,
  pattern,
  session,
  toolCall,
  toolCallUpdate,
} from '../helpers/row-change-builders.js';

/**
 * PostgreSQL's rendering of RowChange (pg-row-applier.ts) leaves the rows SqliteRowApplier leaves
 * (docs/plans/store-port.md, step 7): the same changes on a fresh store of each, every table they
 * write read back from both and compared. PostgreSQL gets them in batches of any size, since its
 * applier groups a batch's changes of a kind into one statement across the others (pg-row-schedule.ts).
 * Skipped, with the reason printed, where no PostgreSQL server binaries are installed.
 */

const server = postgresForFile();

describe.runIf(postgresTestsRun)('RowChanges on SQLite and on PostgreSQL leave the same rows', () => {
  let stores: RowStores;
  beforeAll(() => {
    stores = new RowStores(() => freshDatabase(server));
  });
  afterAll(async () => {
    await stores?.close();
  });

  /** Applies `changes` to both stores, PostgreSQL's in one call and then one call per change. */
  async function expectSameRows(setup: Setup, changes: readonly RowChange[]) {
    const sqlite = stores.sqlite(setup, changes);
    const batched = await stores.onPostgres(setup, changes);
    expect(batched.tables).toEqual(sqlite);
    const oneByOne = await stores.onPostgres(
      setup,
      changes,
      changes.map(() => 1),
    );
    expect(oneByOne.tables).toEqual(sqlite);
    return { sqlite, statements: batched.statements };
  }

  it('every kind, in one batch: created, filled, upserted, updated, closed, added to, trimmed', async () => {
    const changes: RowChange[] = [
      session('sess_a', 100),
      session('sess_b', 101, 'sess_a'),
      { kind: 'session.sticky', sessionId: 'sess_a', model: 'scripted:pinned', atUs: 102 },
      {
        kind: 'message.upsert',
        id: 'msg_1',
        sessionId: 'sess_a',
        turnId: 'turn_1',
        role: 'assistant',
        contentJson: '[]',
        status: 'complete',
        model: 'scripted:a',
        usageJson: null,
        createdAtUs: 103,
      },
      toolCall('call_1', 'pending'),
      toolCall('call_2', 'running'),
      toolCall('call_3', 'pending', { turnId: null, messageId: null }),
      {
        kind: 'toolCall.update',
        id: 'call_1',
        sessionId: 'sess_a',
        turnId: 'turn_1',
        messageId: 'msg_1',
        status: 'completed',
        outputJson: '"done"',
        errorClass: null,
        atUs: 104,
      },
      {
        kind: 'toolCall.update',
        id: 'call_3',
        sessionId: 'sess_a',
        turnId: null,
        messageId: null,
        status: 'running',
        outputJson: null,
        errorClass: null,
        atUs: 105,
      },
      closeOpen(106),
      { kind: 'budget.caps', sessionId: 'sess_a', capsJson: '{"usd":1}' },
      { kind: 'budget.spend', sessionId: 'sess_a', usd: 0.1, tokens: 10 },
      { kind: 'budget.spend', sessionId: 'sess_b', usd: 0.2, tokens: 20 },
      { kind: 'budget.spend', sessionId: 'sess_a', usd: 0.2, tokens: 30 },
      { kind: 'queue.save', sessionId: 'sess_a', queueJson: '["next"]' },
      { kind: 'queue.save', sessionId: 'sess_b', queueJson: null },
      pattern(1, 1000),
      pattern(2, 2000),
      pattern(1, 3000, { rowId: null, model: 'scripted:b' }),
      { kind: 'pattern.deleteRecordedBefore', cutoffUs: 1500 },
      { kind: 'pattern.deleteOldest', count: 1 },
      pattern(3, 4000),
      { kind: 'pattern.deleteAll' },
      pattern(4, 5000),
      {
        kind: 'archive.insert',
        events: [1, 2, 3, 4, 5].map((n) => archived('sess_a', n, n * 10)),
      },
      { kind: 'archive.insert', events: [archived('sess_a', 3, 999), archived('sess_b', 1, 5)] },
      { kind: 'archive.prune', sessionIds: ['sess_a', 'sess_b'], cutoffUs: 45, keep: 2 },
      {
        kind: 'gap.reported',
        sessionId: 'sess_a',
        gapStartId: 'evt_1',
        gapEndId: 'evt_5',
        missingCount: 3,
        atUs: 107,
      },
      {
        kind: 'gap.reported',
        sessionId: 'sess_a',
        gapStartId: 'evt_1',
        gapEndId: 'evt_9',
        missingCount: 7,
        atUs: 108,
      },
      { kind: 'title.set', sessionId: 'sess_a', title: 'Mine', atUs: 109 },
      { kind: 'title.set', sessionId: 'sess_b', title: 'Gone', atUs: 110 },
      { kind: 'title.set', sessionId: 'sess_b', title: null, atUs: 111 },
      { kind: 'session.end', sessionId: 'sess_b', disposition: 'completed', atUs: 112 },
    ];
    const kinds = new Set(changes.map((change) => change.kind));
    expect(kinds.size).toBe(18); // all 19 but handoff.settle, which PostgreSQL refuses (below)
    const { sqlite, statements } = await expectSameRows([], changes);
    expect(sqlite.sessions!.find((row) => row.id === 'sess_a')).toMatchObject({
      spent_tokens: 40,
      active_model: 'scripted:pinned',
    });
    expect(sqlite.tool_calls!.map((row) => row.status)).toEqual(['completed', 'cancelled', 'cancelled']);
    expect(sqlite.stream_events!.map((row) => row.id)).toEqual(['evt_004', 'evt_005', 'evt_001']);
    expect(statements).toBeLessThan(changes.length);
  });

  it('turns of several sessions, queued session after session, in few statements', async () => {
    const turn = (sessionId: string, round: number): RowChange[] => [
      {
        kind: 'message.upsert',
        id: `msg_${sessionId}_${round}`,
        sessionId,
        turnId: `turn_${round}`,
        role: 'assistant',
        contentJson: `"round ${round}"`,
        status: 'complete',
        model: 'scripted:a',
        usageJson: null,
        createdAtUs: round,
      },
      toolCall(`call_${round}`, 'running', { sessionId, turnId: `turn_${round}`, atUs: round }),
      { ...toolCallUpdate(`call_${round}`, 'completed'), sessionId, turnId: `turn_${round}` },
      { kind: 'archive.insert', events: [archived(sessionId, round, round)] },
      { kind: 'budget.spend', sessionId, usd: 0.1, tokens: round },
      { kind: 'budget.spend', sessionId, usd: 0.2, tokens: round },
    ];
    const changes: RowChange[] = [
      ...['sess_a', 'sess_b'].flatMap((id) => turn(id, 1)),
      session('sess_c', 5, 'sess_a'),
      ...['sess_a', 'sess_b', 'sess_c'].flatMap((id) => turn(id, 2)),
      toolCall('call_open', 'pending', { sessionId: 'sess_b' }),
      {
        kind: 'toolCall.closeOpen',
        sessionId: 'sess_b',
        turnId: null,
        status: 'failed',
        errorClass: 'turn_failed',
        outputJson: '"cut"',
        atUs: 9,
      },
      ...['sess_a', 'sess_b', 'sess_c'].flatMap((id) => turn(id, 3)),
    ];
    const { sqlite, statements } = await expectSameRows(
      [bareSession('sess_a'), bareSession('sess_b')],
      changes,
    );
    expect(sqlite.tool_calls!.filter((row) => row.status !== 'completed').map((row) => row.id)).toEqual([
      'call_open',
    ]);
    expect(changes.length).toBe(51);
    expect(statements, `${statements} statements`).toBeLessThanOrEqual(20);
  });

  it('a spend adds to what is stored, each spend of a batch in turn', async () => {
    const setup = [
      bareSession('sess_a'),
      bareSession('sess_b'),
      "UPDATE sessions SET spent_usd = 0.1, spent_tokens = 7 WHERE id = 'sess_a'",
      "UPDATE sessions SET spent_usd = 1e16, spent_tokens = 0 WHERE id = 'sess_b'",
    ];
    const spend = (sessionId: string, usd: number, tokens: number): RowChange => ({
      kind: 'budget.spend',
      sessionId,
      usd,
      tokens,
    });
    const { sqlite } = await expectSameRows(setup, [
      spend('sess_a', 0.2, 1),
      spend('sess_b', 1, 1),
      spend('sess_a', 0.3, 2),
      spend('sess_b', 1, 1),
    ]);
    // Added up first, the spends would give 0.1 + 0.5 = 0.6 and 1e16 + 2.
    expect(sqlite.sessions!.map((row) => [row.spent_usd, row.spent_tokens])).toEqual([
      [0.1 + 0.2 + 0.3, 10],
      [1e16, 2],
    ]);
  });

  it('closing open calls touches only pending and running ones, of the turn when one is named', async () => {
    const changes: RowChange[] = [
      session('sess_a', 1),
      toolCall('done', 'completed'),
      toolCall('failed', 'failed'),
      toolCall('waiting', 'pending'),
      toolCall('other_turn', 'running', { turnId: 'turn_2' }),
      toolCall('no_turn', 'pending', { turnId: null }),
      {
        kind: 'toolCall.update',
        id: 'done',
        sessionId: 'sess_a',
        turnId: 'turn_1',
        messageId: 'msg_1',
        status: 'completed',
        outputJson: '"kept"',
        errorClass: null,
        atUs: 11,
      },
      {
        kind: 'toolCall.closeOpen',
        sessionId: 'sess_a',
        turnId: 'turn_1',
        status: 'failed',
        errorClass: 'turn_failed',
        outputJson: '"cut"',
        atUs: 20,
      },
      {
        kind: 'toolCall.closeOpen',
        sessionId: 'sess_a',
        turnId: null,
        status: 'cancelled',
        errorClass: 'cancelled',
        outputJson: '"stopped"',
        atUs: 30,
      },
    ];
    const { sqlite } = await expectSameRows([], changes);
    expect(sqlite.tool_calls!.map((row) => [row.id, row.status, row.output_json])).toEqual([
      ['done', 'completed', '"kept"'],
      ['failed', 'failed', null],
      ['waiting', 'failed', '"cut"'],
      ['other_turn', 'cancelled', '"stopped"'],
      ['no_turn', 'cancelled', '"stopped"'],
    ]);
  });

  it('pattern deletes take the fingerprints left empty, and ones empty before', async () => {
    const setup = [
      "INSERT INTO pattern_fingerprints (id, key, kind, features_json, created_at_us) VALUES ('fp_empty', 'key_empty', 'structural', '{}', 0)",
    ];
    const inserts = [1, 2, 3, 4].map((n) => pattern(n, n * 1000));
    for (const trim of [
      { kind: 'pattern.deleteRecordedBefore', cutoffUs: 2500 },
      { kind: 'pattern.deleteOldest', count: 3 },
      { kind: 'pattern.deleteOldest', count: 0 },
      { kind: 'pattern.deleteOldest', count: -1 },
      { kind: 'pattern.deleteAll' },
    ] as const) {
      const { sqlite } = await expectSameRows(setup, [...inserts, trim]);
      expect(
        sqlite.pattern_fingerprints!.map((row) => row.id),
        trim.kind,
      ).not.toContain('fp_empty');
    }
  });

  it('a session created over a bare row fills it in and keeps its creation time', async () => {
    const setup = [bareSession('sess_a', 5), bareSession('sess_p', 6)];
    const { sqlite } = await expectSameRows(setup, [
      session('sess_a', 50, 'sess_p'),
      { ...session('sess_a', 60, 'sess_p'), activeModel: null, stickyModel: 'scripted:s' },
    ]);
    expect(sqlite.sessions![0]).toMatchObject({ id: 'sess_a', created_at_us: 5, updated_at_us: 60 });
  });

  it('a message saved again keeps its role, model and creation time', async () => {
    const message = (contentJson: string, role: string, model: string | null, createdAtUs: number) =>
      ({
        kind: 'message.upsert',
        id: 'msg_1',
        sessionId: 'sess_a',
        turnId: 'turn_1',
        role,
        contentJson,
        status: 'complete',
        model,
        usageJson: '{"in":1}',
        createdAtUs,
      }) as const;
    await expectSameRows(
      [bareSession('sess_a')],
      [
        message('"a"', 'assistant', 'scripted:a', 1),
        message('"ab"', 'user', null, 2),
        message('"abc"', 'tool', 'x', 3),
      ],
    );
  });

  it('an archive prune keeps the newest `keep` (one when 0) and the horizon never falls', async () => {
    const setup = ["INSERT INTO stream_horizon (session_id, before_id) VALUES ('sess_b', 'evt_900')"];
    const events = [1, 2, 3, 4].flatMap((n) => [archived('sess_a', n, n), archived('sess_b', n, n)]);
    for (const keep of [0, 1, 3, 10]) {
      await expectSameRows(setup, [
        { kind: 'archive.insert', events },
        { kind: 'archive.prune', sessionIds: ['sess_a', 'sess_b', 'sess_a', 'sess_none'], cutoffUs: 3, keep },
      ]);
    }
  });

  it('keys from a row id block are kept; without one, both stores number rows from 1', async () => {
    const block = 2 ** 32 * 7;
    await expectSameRows(
      [],
      [
        session('sess_a', 1),
        toolCall('call_1', 'pending', { rowId: block + 1 }),
        toolCall('call_2', 'pending', { rowId: block + 2 }),
        pattern(1, 1, { rowId: block + 3 }),
      ],
    );
    await expectSameRows([], [session('sess_a', 1), toolCall('call_1', 'pending'), pattern(1, 1)]);
  });

  it('a handoff settle is refused before anything is applied: PostgreSQL has no handoff queue', async () => {
    const client = await stores.postgres();
    await expect(
      applyRowChanges(client, [
        session('sess_refused', 1),
        { kind: 'handoff.settle', settles: [{ handoffId: 1, by: 'discard' }] },
      ]),
    ).rejects.toThrow(/handoff\.settle/);
    const left = await client.query("SELECT 1 FROM sessions WHERE id = 'sess_refused'");
    expect(left.rowCount).toBe(0);
  });

  it('random sequences of valid changes, in random batches, leave the same rows', async () => {
    await fc.assert(
      fc.asyncProperty(randomChangeSequences(), async ({ setup, changes, chunks }) => {
        const sqlite = stores.sqlite(setup, changes);
        const postgres = await stores.onPostgres(setup, changes, chunks);
        expect(postgres.tables).toEqual(sqlite);
      }),
      { numRuns: 50 },
    );
  }, 120_000);
});
