import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startDirectService } from '../../src/core/app/start-direct.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { silentLogger } from '../../src/core/logger.js';
import { jsonRequest } from '../helpers/http.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { subscribeOn } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { openClient, type TestClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 35, store-port step 8: `metis serve` on PostgreSQL alone (`store.working_copy: false`) keeps the
 * outage behaviour of the working copy. While the database is away new turns are refused by name (503
 * METIS_ERR_STORE_UNAVAILABLE), running turns finish, and once it is back everything waiting in memory
 * is written once and in order; a restart of the database ends no process.
 */
const pg = postgresForFile();

function psqlIn(url: string, sql: string): string {
  return pg.psql(sql, new URL(url).pathname.slice(1)).trim();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A data folder whose config turns the working copy off; `slow:` turns take about a second. */
function home(): { home: string; args: string[] } {
  const dir = tempDir();
  const configPath = join(dir, 'metis.config.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      store: { working_copy: false },
      runtime: { scripted: { slow_tokens: 40, slow_token_delay_ms: 25 }, on_restart: 'fail' },
    }),
  );
  return { home: dir, args: ['--config', configPath] };
}

/** A real WebSocket subscribed (preset:full, no snapshot) to one session of a `metis serve` child. */
async function streamOf(url: string, sessionId: string): Promise<TestClient> {
  const handshake = await jsonRequest(url, 'GET', `/sessions/${sessionId}`);
  expect(handshake.status, JSON.stringify(handshake.body)).toBe(200);
  const client = await openClient(handshake.body.ws_url);
  await subscribeOn(client, { snapshot: false });
  return client;
}

const ENDS = new Set(['turn.completed', 'turn.cancelled']);

/**
 * The store's invariants after an outage: per session `seq` is 1..n with no hole or repeat, no event id
 * twice, and every started turn has exactly one end.
 */
function expectWhole(url: string): void {
  expect(
    psqlIn(
      url,
      `SELECT count(*) FROM (SELECT session_id, count(*) AS n, count(DISTINCT seq) AS d, max(seq) AS top
         FROM events GROUP BY session_id) s WHERE n <> top OR d <> n`,
    ),
  ).toBe('0');
  expect(psqlIn(url, 'SELECT count(*) - count(DISTINCT id) FROM events')).toBe('0');
  expect(
    psqlIn(
      url,
      `SELECT count(*) FROM events s WHERE s.type = 'turn.started' AND (SELECT count(*) FROM events e
         WHERE e.turn_id = s.turn_id AND e.type IN ('turn.completed', 'turn.cancelled')) <> 1`,
    ),
  ).toBe('0');
}

describe.runIf(postgresTestsRun)('metis serve on PostgreSQL alone through a database outage', () => {
  it('a restart under load: new turns refused by name while it is away, then nothing lost or doubled', async () => {
    const url = freshDatabase(pg);
    const data = home();
    const server = await serveCli(data.home, [...data.args, '--store', url]);
    const sessions: string[] = [];
    for (let i = 0; i < 3; i += 1)
      sessions.push((await jsonRequest(server.url, 'POST', '/sessions', {})).body.session_id);
    const clients = await Promise.all(sessions.map((id) => streamOf(server.url, id)));
    // The refusal is probed on a session of its own: the load's sessions keep their turn counts.
    const probe = (await jsonRequest(server.url, 'POST', '/sessions', {})).body.session_id as string;

    // Each session runs rounds of turns; a turn refused while the store is away is asked again later.
    const refusals: { status: number; body: any }[] = [];
    const ROUNDS = 4;
    const runSession = async (sessionId: string) => {
      for (let round = 0; round < ROUNDS; round += 1) {
        const message = round % 2 === 0 ? 'slow: a long answer' : 'think: time';
        for (;;) {
          const submitted = await jsonRequest(server.url, 'POST', `/sessions/${sessionId}/turns`, {
            message,
          });
          if (submitted.status === 202) break;
          refusals.push(submitted);
          await sleep(250);
        }
        // The session's own answer (the owner's memory), not the stream: the stream shows an end only
        // once it is stored, and the load is to go on submitting while the store is away.
        for (;;) {
          const state = await jsonRequest(server.url, 'GET', `/sessions/${sessionId}`);
          if (state.status === 200 && state.body.session.current_turn_id === null) break;
          await sleep(100);
        }
      }
    };
    const load = Promise.all(sessions.map((id) => runSession(id)));
    await sleep(500);
    await pg.stop();
    const stoppedAt = Date.now();

    // Within 10 s a new turn is refused, naming the store, with no stack.
    let refused: { status: number; body: any } | null = null;
    while (refused === null && Date.now() - stoppedAt < 10_000) {
      const attempt = await jsonRequest(server.url, 'POST', `/sessions/${probe}/turns`, {
        message: 'hello',
      });
      if (attempt.status === 503) refused = attempt;
      else await sleep(200);
    }
    expect(refused?.body.error.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
    expect(refused?.body.error.message).toContain('is unreachable');
    expect(refused?.body.error.message).not.toMatch(/\n\s+at /);
    await sleep(3000);
    expect(server.process.exitCode).toBeNull();
    await pg.start();
    await load;
    for (const client of clients)
      await client.waitFor(
        (frame) =>
          frame.type === 'event' &&
          ENDS.has(frame.event.type) &&
          client.events().filter((event) => ENDS.has(event.type)).length >= ROUNDS,
        30_000,
      );
    expect(server.process.exitCode).toBeNull();
    // The load went on submitting while the store was away, and every refusal it met was the named one.
    expect(refusals.length).toBeGreaterThan(0);
    for (const answer of refusals) expect(answer.body.error.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
    expect(await server.stop('SIGTERM')).toBe(0);

    expectWhole(url);
    for (const [index, sessionId] of sessions.entries()) {
      const stored = psqlIn(url, `SELECT id FROM events WHERE session_id = '${sessionId}' ORDER BY id`).split(
        '\n',
      );
      const seen = clients[index]!.events()
        .filter((event) => event.session_id === sessionId)
        .map((event) => event.id as string);
      // Ids increase on the stream, and from its first event on it showed each stored event of its
      // session once (streaming deltas are not stored; what came before the subscription is not sent).
      expect(seen.every((id, i) => i === 0 || id > seen[i - 1]!)).toBe(true);
      const storedSet = new Set(stored);
      expect(seen.filter((id) => storedSet.has(id))).toEqual(stored.filter((id) => id >= seen[0]!));
      expect(stored.filter((id) => id >= seen[0]!).length).toBeGreaterThan(ROUNDS * 4);
      expect(
        psqlIn(
          url,
          `SELECT count(*) FROM events WHERE session_id = '${sessionId}' AND type = 'turn.started'`,
        ),
      ).toBe(String(ROUNDS));
    }
  }, 120_000);

  it('a server killed while the database is away: every acknowledged turn is stored, the cut ones end once', async () => {
    const url = freshDatabase(pg);
    const data = home();
    const first = await serveCli(data.home, [...data.args, '--store', url]);
    const acknowledged = { sessions: [] as string[], turns: [] as string[] };
    const newSession = async () => {
      const created = await jsonRequest(first.url, 'POST', '/sessions', {});
      if (created.status === 201) acknowledged.sessions.push(created.body.session_id);
      return created;
    };
    const submit = async (sessionId: string, message: string) => {
      const submitted = await jsonRequest(first.url, 'POST', `/sessions/${sessionId}/turns`, { message });
      if (submitted.status === 202) acknowledged.turns.push(submitted.body.turn_id);
      return submitted;
    };
    const [a, b] = [(await newSession()).body.session_id, (await newSession()).body.session_id];
    expect((await submit(a, 'hello')).status).toBe(202);
    await expect
      .poll(() => psqlIn(url, `SELECT count(*) FROM events WHERE type = 'turn.completed'`), {
        timeout: 10_000,
      })
      .toBe('1');
    const cutInA = await submit(a, 'slow: a long answer');
    const cutInB = await submit(b, 'slow: a long answer');
    expect([cutInA.status, cutInB.status]).toEqual([202, 202]);
    await sleep(300);

    await pg.stop();
    // While it is away: A's turn is cancelled (only in memory), and a new session and a new turn are
    // refused (at once once the writer knows, or after the commit wait before it does).
    const cancelled = await jsonRequest(
      first.url,
      'POST',
      `/sessions/${a}/turns/${cutInA.body.turn_id}/cancel`,
      {},
    );
    expect(cancelled.status).toBe(202);
    expect((await newSession()).status).toBe(503);
    await sleep(200);
    const refusedTurn = await submit(a, 'hello again');
    expect(refusedTurn.status).toBe(503);
    expect(refusedTurn.body.error.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
    await first.stop('SIGKILL');
    await pg.start();

    const second = await serveCli(data.home, [...data.args, '--store', url]);
    expect(await second.stop('SIGTERM')).toBe(0);
    // A 2xx means stored: every acknowledged session and turn is in PostgreSQL. And the store claims
    // nothing that was not acknowledged: no session or turn beyond those (the refused ones never
    // started, and what the killed process held in memory died with it).
    const stored = (sql: string) => psqlIn(url, sql).split('\n').filter(Boolean).sort();
    expect(stored(`SELECT id FROM sessions WHERE id <> 'system'`)).toEqual([...acknowledged.sessions].sort());
    expect(stored(`SELECT turn_id FROM events WHERE type = 'turn.started'`)).toEqual(
      [...acknowledged.turns].sort(),
    );
    // Each cut turn is ended once, by the next start's recovery: the cancel answered 202 "cancelling",
    // which claims no stored end, and its turn.cancelled never reached the store.
    for (const turnId of [cutInA.body.turn_id, cutInB.body.turn_id])
      expect(
        stored(
          `SELECT type FROM events WHERE turn_id = '${turnId}' AND type IN ('turn.completed', 'turn.cancelled')`,
        ),
      ).toEqual(['turn.completed']);
    expectWhole(url);
  }, 90_000);

  it('a stop while the database is away settles within the close bound, logs the loss, and the next start recovers', async () => {
    const url = freshDatabase(pg);
    const dir = tempDir();
    const config = MetisConfigSchema.parse({
      server: { port: 0, shutdown_timeout_ms: 60_000 },
      store: { url, working_copy: false },
      runtime: { scripted: { slow_tokens: 400, slow_token_delay_ms: 25 }, on_restart: 'fail' },
    });
    const start = (logger = silentLogger()) =>
      startDirectService(config, join(dir, 'metis.db'), logger, { tokenFile: join(dir, 'token') });
    const logs = captureLogs('info');
    const first = await start(logs.logger);
    onTestFinished(() => first.stop());
    const token = first.auth.token;
    const session = (await jsonRequest(first.url, 'POST', '/sessions', {}, { token })).body
      .session_id as string;
    const cut = await jsonRequest(
      first.url,
      'POST',
      `/sessions/${session}/turns`,
      { message: 'slow: x' },
      { token },
    );
    expect(cut.status).toBe(202);
    await sleep(300);
    await pg.stop();
    await expect.poll(() => first.trace.writer.failure, { timeout: 10_000 }).not.toBeNull();

    const began = Date.now();
    await first.stop();
    const tookMs = Date.now() - began;
    await settleLogs();
    // The close flush's 5 s (pg-context.ts closeFlushTimeoutMs) plus a margin, far below the 60 s bound.
    expect(tookMs).toBeLessThan(5000 + 3000);
    await settleLogs();
    expect(logs.at(LEVEL.error).map((record) => record.msg)).toContain(
      'closing the PostgreSQL store while it is unavailable: the events still waiting are lost',
    );

    await pg.start();
    const second = await start();
    onTestFinished(() => second.stop());
    expect(second.recovery.turns).toBe(1);
    const again = await jsonRequest(
      second.url,
      'POST',
      `/sessions/${session}/turns`,
      { message: 'hello' },
      { token: second.auth.token },
    );
    expect(again.status).toBe(202);
    await second.runtime.currentTurn(session)?.done;
    await second.stop();
    expectWhole(url);
  }, 90_000);
});
