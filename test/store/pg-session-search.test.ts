import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresClient } from '../../src/core/store/postgres/connect.js';
import { pgSessionListRow, searchPgSessions } from '../../src/core/store/postgres/pg-session-search.js';
import { pgEventsPerHour } from '../../src/core/store/postgres/pg-store-reads.js';
import { pgUsageByBucket } from '../../src/core/store/postgres/pg-usage-stats.js';
import { type SessionSearch, searchSessions, sessionListRow } from '../../src/core/store/session-search.js';
import { rowApplierOf } from '../../src/core/store/sqlite-row-applier.js';
import { eventsPerHour } from '../../src/core/store/stats.js';
import { copyStore } from '../../src/core/store/store-copy.js';
import { type UsageQuery, usageByBucket } from '../../src/core/store/usage-stats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { type Rig, startRig } from '../server/trace-api-rig.js';

/**
 * Issue 35: `GET /sessions` read from PostgreSQL (a cluster node's working copy holds only some
 * sessions). The same sessions, copied from a SQLite store into PostgreSQL, list the same rows from both
 * for every filter, search and page: titles from the first message, a user's title (kept by the server
 * that set it), tags, model, tokens, cost, latency, the last turn's status, conformance sessions.
 */

const pg = postgresForFile();

describe.skipIf(!postgresTestsRun)('the session list read from PostgreSQL', () => {
  let rig: Rig;
  let client: ReturnType<typeof postgresClient>;
  const made: Record<string, string> = {};

  beforeAll(async () => {
    rig = await startRig();
    made.idle = await rig.createSession();
    made.plain = await rig.createSession();
    const rated = await rig.runTurn(
      made.plain,
      'Tell me about   the zebra migration in the Serengeti, with numbers',
    );
    const feedback = { rating: 'thumbs_up', turn_id: rated };
    expect((await rig.request('POST', `/sessions/${made.plain}/feedback`, feedback)).status).toBe(201);
    expect(
      (await rig.request('POST', `/sessions/${made.plain}/feedback`, { rating: 'thumbs_down' })).status,
    ).toBe(201);
    await rig.runTurn(made.plain, 'and the wildebeest?');
    made.thinker = await rig.createSession();
    await rig.runTurn(made.thinker, 'think: time');
    made.failing = await rig.createSession();
    await rig.runTurn(made.failing, 'fail: server_error');
    made.conformance = await rig.createSession({ model: 'scripted:conformance' });
    await rig.runTurn(made.conformance, 'hello from the suite');
    made.long = await rig.createSession();
    await rig.runTurn(made.long, `${'word '.repeat(40)}end`);
    expect((await rig.request('POST', `/sessions/${made.long}/end`, {})).status).toBe(200);
    rowApplierOf(rig.context.db).apply({
      kind: 'title.set',
      sessionId: made.thinker,
      title: 'Deep 100% thoughts',
      atUs: 1,
    });
    await rig.context.flush();
    const store = freshDatabase(pg);
    await copyStore({ from: rig.dbPath, to: store });
    client = postgresClient(store, 'inspect');
    await client.connect();
  }, 60_000);
  afterAll(async () => {
    await client?.end();
    await rig?.close();
  });

  const searches: [string, Partial<SessionSearch>][] = [
    ['everything', { includeConformance: true }],
    ['without conformance', {}],
    ['a page of two', { limit: 2 }],
    ['words as prefixes', { q: 'zeb serengeti' }],
    ['an assistant word', { q: 'wildebeest' }],
    ['a user title', { q: '100%' }],
    ['an id', { q: 'placeholder' }],
    ['nothing', { q: 'nowhere to be found' }],
    ['failed turns', { turnStatus: 'failed' }],
    ['completed turns', { turnStatus: 'completed' }],
    ['a model', { model: 'scripted:demo' }],
    ['ended', { status: 'ended' }],
    ['active', { status: 'active', includeConformance: true }],
    ['cost above zero', { minCostUsd: 0.000_000_1 }],
    ['latency bounds', { minLatencyP95Ms: 0, maxLatencyP95Ms: 100_000 }],
    ['latency too high', { minLatencyP95Ms: 100_000 }],
  ];

  it.each(searches)('lists the same rows as SQLite: %s', async (_, partial) => {
    const search: SessionSearch = {
      includeConformance: false,
      limit: 50,
      ...partial,
      ...(partial.q === 'placeholder' ? { q: made.failing } : {}),
    };
    const fromSqlite = searchSessions(rig.context.db, search);
    const fromPostgres = await searchPgSessions(client, search);
    expect(fromPostgres).toEqual(fromSqlite);
  });

  it('pages the same way: the next page starts after the last row', async () => {
    const first = searchSessions(rig.context.db, { includeConformance: true, limit: 3 });
    const last = first.rows.at(-1)!;
    const after = { createdAtUs: last.created_at_us, id: last.id };
    const search: SessionSearch = { includeConformance: true, limit: 3, after };
    expect(first.more).toBe(true);
    expect(await searchPgSessions(client, search)).toEqual(searchSessions(rig.context.db, search));
  });

  it('answers one session as SQLite does, whatever the filters would say of it; none for an unknown id', async () => {
    for (const id of Object.values(made)) {
      const fromSqlite = sessionListRow(rig.context.db, id);
      expect(fromSqlite?.id).toBe(id);
      expect(await pgSessionListRow(client, id)).toEqual(fromSqlite);
    }
    expect(await pgSessionListRow(client, 'sess_nope')).toBeUndefined();
  });

  const usageQueries: [string, Pick<UsageQuery, 'bucket' | 'model'>][] = [
    ['by hour', { bucket: 'hour' }],
    ['by day', { bucket: 'day' }],
    ['one model', { bucket: 'hour', model: 'scripted:demo' }],
    ['a model with no calls', { bucket: 'hour', model: 'nobody:else' }],
  ];
  it.each(usageQueries)(
    'GET /stats/usage from PostgreSQL counts as the SQLite rollup does: %s',
    async (_, partial) => {
      const now = Date.now() * 1000;
      const query: UsageQuery = { fromUs: now - 48 * 3_600_000_000, toUs: now + 1, ...partial };
      const fromSqlite = usageByBucket(rig.context.db, query);
      if (partial.model === undefined) {
        expect(fromSqlite.some((row) => row.failed_turns > 0)).toBe(true);
        expect(fromSqlite.some((row) => row.feedback_up > 0 && row.feedback_down > 0)).toBe(true);
      }
      expect(await pgUsageByBucket(client, query)).toEqual(fromSqlite);
    },
  );

  it('GET /store/stats counts the events of each of the last hours as SQLite does', async () => {
    const now = Date.now();
    const fromSqlite = eventsPerHour(rig.context.db, 48, now);
    expect(fromSqlite.some((hour) => hour.count > 0)).toBe(true);
    expect(await pgEventsPerHour(client, 48, now)).toEqual(fromSqlite);
  });
});
