import { describe, expect, it, onTestFinished } from 'vitest';
import { ClusterSeat } from '../../src/core/app/cluster-seat.js';
import { startServer } from '../../src/core/app/metis-server.js';
import { recoverOnPostgres } from '../../src/core/app/start-direct.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { STREAMING_TYPES } from '../../src/core/events/streaming.js';
import { silentLogger } from '../../src/core/logger.js';
import { openAndResumeCutTurns } from '../../src/core/runtime/resume-cut-turns.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { openPostgresContext, type PostgresContext } from '../../src/core/store/postgres/pg-context.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { ofType, shapeOf, strictlyIncreasing, subscribe, waitForType } from '../helpers/protocol.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { type TestServer, testServerOn } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 35, store-port step 8: a server on PostgreSQL with no working copy. Everything a client does
 * goes to the store of record and is read back from it: no SQLite file is opened anywhere.
 */
describe.runIf(postgresTestsRun)('a server on PostgreSQL with no working copy', () => {
  const postgres = postgresForFile();

  type PgTestServer = Omit<TestServer, 'context'> & { context: PostgresContext; close(): Promise<void> };

  async function serverOn(url: string, config: RuntimeConfigInput = {}): Promise<PgTestServer> {
    const context = await openPostgresContext({
      url,
      setting: '--store',
    });
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      config: testRuntimeConfig(config),
    });
    // A single server lets a request naming a session in once the runtime holds it (runtime.open), as
    // `metis serve` does (cluster-seat.ts).
    const sessionRouter = new ClusterSeat(false, context.port.sessions).router(runtime);
    const server = await startServer(runtime, context, {
      port: 0,
      sessionRouter,
    });
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      await server.close();
      await runtime.close();
      await context.close();
    };
    onTestFinished(close);
    return { context, ...testServerOn(runtime, server, tempDir('metis-ws-')), close };
  }

  const seqsOf = async (context: PostgresContext, sessionId: string): Promise<number[]> =>
    (
      await context.pool.query<{ seq: number }>(
        'SELECT seq::int AS seq FROM events WHERE session_id = $1 ORDER BY id',
        [sessionId],
      )
    ).rows.map((row) => row.seq);

  /** A server that dies mid-way through a slow turn: the store keeps what was committed, no end. */
  async function cutByDyingServer(url: string, config: RuntimeConfigInput) {
    const first = await serverOn(url, config);
    const sessionId = await first.createSession();
    const { client } = await subscribe(first, sessionId);
    const cutTurn = await first.submit(sessionId, 'slow: the long answer');
    await waitForType(client, 'text.delta', 3);
    await first.server.close();
    await first.context.close();
    await first.runtime.close();
    return { sessionId, cutTurn };
  }

  const endsOf = async (context: PostgresContext, turnId: string): Promise<string[]> =>
    (
      await context.pool.query<{ type: string }>(
        `SELECT type FROM events WHERE turn_id = $1 AND type IN ('turn.completed', 'turn.cancelled')`,
        [turnId],
      )
    ).rows.map((row) => row.type);

  it('runs turns, streams them and answers every read from the store of record', async () => {
    const t = await serverOn(freshDatabase(postgres));
    const sessionId = await t.createSession();
    const { client, snapshot } = await subscribe(t, sessionId);
    expect(snapshot.session.id).toBe(sessionId);
    await t.submit(sessionId, 'hello there');
    await waitForType(client, 'turn.completed');
    const streamed = client.events();
    expect(strictlyIncreasing(streamed)).toBe(true);
    expect(shapeOf(streamed)).toContain('turn.started');

    // The store holds what the client was shown, numbered 1..n in the session.
    const seqs = await seqsOf(t.context, sessionId);
    expect(seqs).toEqual(seqs.map((_, index) => index + 1));
    const storedIds = (
      await t.context.pool.query<{ id: string }>('SELECT id FROM events WHERE session_id = $1', [sessionId])
    ).rows.map((row) => row.id);
    // Streaming deltas go to the stream archive, not the trace (bus spec §7).
    const traced = streamed.filter((event: any) => !STREAMING_TYPES.has(event.type));
    expect(traced.length).toBeGreaterThan(3);
    for (const event of traced) expect(storedIds).toContain(event.id);

    const messages = await t.request('GET', `/sessions/${sessionId}/messages`);
    expect(messages.status).toBe(200);
    expect(messages.body.messages.map((m: any) => m.role)).toEqual(['user', 'assistant']);
    const listed = await t.request('GET', '/sessions');
    expect(listed.body.sessions.map((s: any) => s.id)).toContain(sessionId);
    const titled = await t.request('PATCH', `/sessions/${sessionId}`, { title: 'on postgres' });
    expect(titled.status).toBe(200);
    expect(titled.body.title).toBe('on postgres');
    const trace = await t.request('GET', `/sessions/${sessionId}/trace`);
    expect(trace.status).toBe(200);
  });

  it('after a restart, a session goes on where it was: its figures, its seq and its replay', async () => {
    const url = freshDatabase(postgres);
    const first = await serverOn(url);
    const sessionId = await first.createSession();
    const { client } = await subscribe(first, sessionId);
    await first.submit(sessionId, 'first question');
    await waitForType(client, 'turn.completed');
    const lastSeen = client.events().at(-1).id as string;
    const before = await first.request('GET', `/sessions/${sessionId}`);
    await first.close();

    const second = await serverOn(url);
    const after = await second.request('GET', `/sessions/${sessionId}`);
    expect(after.status).toBe(200);
    expect(after.body.session.turn_count).toBe(1);
    expect(after.body.session.cost_so_far_usd).toBe(before.body.session.cost_so_far_usd);
    // A reconnect from the last id seen replays what came after it, from PostgreSQL, then goes live.
    const again = await subscribe(second, sessionId, { since: lastSeen, snapshot: false });
    await second.submit(sessionId, 'second question');
    await waitForType(again.client, 'turn.completed');
    const replayed = again.client.events();
    expect(replayed.every((event: any) => event.id > lastSeen)).toBe(true);
    expect(ofType(replayed, 'turn.started')).toHaveLength(1);
    const seqs = await seqsOf(second.context, sessionId);
    expect(seqs).toEqual(seqs.map((_, index) => index + 1));
  });

  it('a turn a crash cut is closed from PostgreSQL at the next start, once, and the session goes on', async () => {
    const url = freshDatabase(postgres);
    const { sessionId, cutTurn } = await cutByDyingServer(url, { scripted: { slow_tokens: 4000 } });
    const ends = (context: PostgresContext) => endsOf(context, cutTurn);
    const reopened = await openPostgresContext({ url, setting: '--store' });
    onTestFinished(() => reopened.close());
    expect(await ends(reopened)).toEqual([]);

    const report = await recoverOnPostgres(reopened, { pricingVersion: 'test', logger: silentLogger() });
    expect(report.turns).toBe(1);
    expect(await ends(reopened)).toHaveLength(1);
    const seqs = await seqsOf(reopened, sessionId);
    expect(seqs).toEqual(seqs.map((_, index) => index + 1));
    await reopened.close();

    const second = await serverOn(url);
    const after = await second.request('GET', `/sessions/${sessionId}`);
    expect(after.status).toBe(200);
    expect(after.body.session.current_turn_id).toBeNull();
    const again = await subscribe(second, sessionId, { snapshot: false });
    await second.submit(sessionId, 'and now?');
    await waitForType(again.client, 'turn.completed');
    expect(await ends(second.context)).toHaveLength(1);
    const whole = await seqsOf(second.context, sessionId);
    expect(whole).toEqual(whole.map((_, index) => index + 1));
  });

  it('a second server on the same store is refused, naming the setting; a wrong URL names it too', async () => {
    const url = freshDatabase(postgres);
    await serverOn(url);
    const second = openPostgresContext({ url, setting: 'store.url' });
    await expect(second).rejects.toMatchObject({ code: 'METIS_ERR_DB_LOCKED' });
    await expect(second).rejects.toThrow(/^store\.url: another metis serve/);
    const nowhere = openPostgresContext({ url: `${url}_missing`, setting: '--store' });
    await expect(nowhere).rejects.toThrow(/--store/);
  });

  it('with on_restart resume, the cut turn goes on from PostgreSQL and ends once', async () => {
    const url = freshDatabase(postgres);
    const slow = { scripted: { slow_tokens: 300, slow_token_delay_ms: 5 } };
    const { sessionId, cutTurn } = await cutByDyingServer(url, slow);

    const context = await openPostgresContext({ url, setting: '--store' });
    const report = await recoverOnPostgres(context, {
      pricingVersion: 'test',
      logger: silentLogger(),
      onRestart: 'resume',
    });
    expect(report.resumable.map((cut) => cut.turnId)).toEqual([cutTurn]);
    const runtime = createRuntime({ bus: context.bus, store: context.port, config: testRuntimeConfig(slow) });
    onTestFinished(async () => {
      await runtime.close();
      await context.close();
    });
    await openAndResumeCutTurns(runtime, report.resumable, silentLogger(), 'at start', []);
    await expect.poll(() => runtime.currentTurn(sessionId), { timeout: 15_000 }).toBeNull();
    await context.flush();
    expect(await endsOf(context, cutTurn)).toEqual(['turn.completed']);
    const seqs = await seqsOf(context, sessionId);
    expect(seqs).toEqual(seqs.map((_, index) => index + 1));
  });

  it('a cancel of a turn the session never had answers 404 and turn_not_found, and the server goes on', async () => {
    const t = await serverOn(freshDatabase(postgres));
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    await t.submit(sessionId, 'hello');
    await waitForType(client, 'turn.completed');
    const byHttp = await t.request('POST', `/sessions/${sessionId}/turns/turn_never_was/cancel`, {});
    expect(byHttp.status).toBe(404);
    client.send({ type: 'cancel', turn_id: 'turn_never_was' });
    const refused = await client.waitFor((frame) => frame.type === 'error');
    expect(refused.code).toBe('turn_not_found');
    await t.submit(sessionId, 'still here?');
    await waitForType(client, 'turn.completed', 2);
  });
});
