import pg from 'pg';
import { ulid } from 'ulid';
import { describe, expect, it, onTestFinished } from 'vitest';
import { takeOverHere } from '../../src/core/app/join-cluster.js';
import type { RunningService } from '../../src/core/app/start-service.js';
import { takeOverSession } from '../../src/core/cluster/take-over.js';
import { silentLogger } from '../../src/core/logger.js';
import { BIGINT_AS_NUMBER } from '../../src/core/store/postgres/pg-util.js';
import { readStoredSession, writeStoredSession } from '../../src/core/store/postgres/session-pull.js';
import { SessionStore } from '../../src/core/store/session-store.js';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { subscribeOn } from '../helpers/protocol.js';
import { runCli } from '../helpers/run-cli.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 20 points 2 and 3: a node taking over a session another node ran since brings the session into
 * its working copy from the store, closes the turn the other node left open as crash recovery does,
 * and continues it with seq and ids after the store's. Real PostgreSQL, a real working copy that is
 * stale for the session (reused from its own earlier run while "another node" wrote to the store).
 */

const server = postgresForFile();

function psql(url: string, sql: string): string {
  return server.psql(sql, new URL(url).pathname.slice(1)).trim();
}

async function turn(service: RunningService, sessionId: string, message: string): Promise<void> {
  const submitted = await jsonRequest(
    service.url,
    'POST',
    `/sessions/${sessionId}/turns`,
    { message },
    {
      token: service.auth.token,
    },
  );
  expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
  await service.runtime.currentTurn(sessionId)?.done;
}

/**
 * A session this node ran (a first turn, shipped), and a turn of it another node ran since and died in:
 * its events in the store without the turn's end (copies of the first turn's events, after them in id
 * and seq), absent from this node's copy.
 */
async function sessionWithForeignTurn() {
  const url = freshDatabase(server);
  const service = await serveOnStore(url, tempDir());
  const created = await jsonRequest(service.url, 'POST', '/sessions', {}, { token: service.auth.token });
  const sessionId = created.body.session_id as string;
  await turn(service, sessionId, 'hello');
  await service.trace.flush();
  expect(await service.trace.upstream!.whenShipped(10_000)).toBe(true);
  const firstTurn = psql(
    url,
    `SELECT turn_id FROM events WHERE session_id = '${sessionId}' AND type = 'turn.started'`,
  );
  const copied = psql(
    url,
    `SELECT id FROM events WHERE turn_id = '${firstTurn}' AND type NOT IN ('turn.completed', 'turn.cancelled') ORDER BY id`,
  ).split('\n');
  // Ids from a clock a minute ahead (the other host's): this node's next ids must still come after them.
  const ahead = Date.now() + 60_000;
  const values = copied.map((id, k) => `('${id}', 'evt_${ulid(ahead + k)}', ${k + 1})`).join(', ');
  psql(
    url,
    `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
     SELECT e.session_id, m.new_id, (SELECT max(seq) FROM events WHERE session_id = '${sessionId}') + m.k,
            (extract(epoch from clock_timestamp()) * 1000000)::bigint, 'turn_foreign', NULL, e.type, e.actor, e.sensitivity, e.payload_json
       FROM (VALUES ${values}) AS m(old_id, new_id, k) JOIN events e ON e.id = m.old_id ORDER BY m.k`,
  );
  return { url, service, sessionId, copied };
}

describe.skipIf(!postgresTestsRun)('taking a session over', () => {
  it("brings the other node's events in, closes its open turn, and continues seq and ids after them", async () => {
    const { url, service, sessionId, copied } = await sessionWithForeignTurn();
    const second = service;
    const local = () =>
      second.trace.db
        .prepare("SELECT count(*) FROM events WHERE turn_id = 'turn_foreign'")
        .pluck()
        .get() as number;
    expect(local()).toBe(0);
    // A tool running in another session of this node: taking this session over leaves it alone.
    const bystander = (await jsonRequest(service.url, 'POST', '/sessions', {}, { token: service.auth.token }))
      .body.session_id as string;
    second.trace.db
      .prepare(
        `INSERT INTO tool_calls (id, session_id, turn_id, message_id, tool_name, input_json, status, created_at_us, updated_at_us)
         VALUES ('toolu_bystander', ?, 'turn_x', 'msg_x', 'shell', '{}', 'running', 0, 0)`,
      )
      .run(bystander);
    const client = new pg.Client({ connectionString: url, types: BIGINT_AS_NUMBER });
    await client.connect();
    onTestFinished(() => client.end());
    const report = await takeOverSession(
      {
        read: (id) => readStoredSession(client, id),
        trace: second.trace,
        runtime: second.runtime,
        pricingVersion: 'test',
        logger: silentLogger(),
      },
      sessionId,
    );
    // Without `durableTurns` (runtime.on_restart: fail) the cut turn is closed, none resumes.
    expect(report).toEqual({
      added: copied.length,
      recoveredTurns: 1,
      resumable: [],
      sessionIds: [sessionId],
    });
    await second.trace.flush();
    expect(local()).toBeGreaterThan(copied.length); // brought in, and closed
    expect(
      second.trace.db.prepare("SELECT status FROM tool_calls WHERE id = 'toolu_bystander'").pluck().get(),
    ).toBe('running');
    // Brought in again, a session the copy has as the store has it changes nothing: no new event, and no
    // row rewritten (nothing for the outbox to ship back).
    const outbox = () => second.trace.db.prepare('SELECT count(*) FROM pg_outbox').pluck().get() as number;
    await second.trace.upstream!.whenShipped(10_000);
    const before = outbox();
    expect(writeStoredSession(second.trace.db, await readStoredSession(client, sessionId)).added).toBe(0);
    expect(outbox()).toBe(before);
    await turn(second, sessionId, 'and now?');
    const ended = await jsonRequest(
      second.url,
      'POST',
      `/sessions/${sessionId}/end`,
      {},
      { token: second.auth.token },
    );
    expect(ended.status, JSON.stringify(ended.body)).toBeLessThan(300);
    await second.stop();
    // What the runtime knew of the session was dropped and read again: the foreign turn counts, and so
    // does its cost.
    const endedPayload = JSON.parse(
      psql(
        url,
        `SELECT payload_json FROM events WHERE session_id = '${sessionId}' AND type = 'session.ended'`,
      ),
    ) as { turn_count: number; total_cost_usd: number };
    expect(endedPayload.turn_count).toBe(3);
    const spent = Number(
      psql(
        url,
        `SELECT sum((payload_json::json->>'cost_usd')::numeric) FROM events
          WHERE session_id = '${sessionId}' AND type = 'llm.call_completed'`,
      ),
    );
    expect(spent).toBeGreaterThan(0);
    expect(endedPayload.total_cost_usd).toBeCloseTo(spent, 9);
    // Ids rose past the other host's clock: in seq order every id is above the one before.
    expect(
      psql(
        url,
        `SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY seq) AS before FROM events WHERE session_id = '${sessionId}') t
          WHERE before IS NOT NULL AND id <= before`,
      ),
    ).toBe('0');

    // The store: one session, seq whole (1..n, each once), ids rising with seq, the foreign turn ended
    // once, the new turn completed.
    const [count, distinct, low, high] = psql(
      url,
      `SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events WHERE session_id = '${sessionId}'`,
    ).split('|');
    expect({ count, distinct, low, high }).toEqual({ count, distinct: count, low: '1', high: count });
    expect(
      psql(
        url,
        `SELECT count(*) FROM (SELECT seq, lag(seq) OVER (ORDER BY id) AS before FROM events WHERE session_id = '${sessionId}') t
          WHERE before IS NOT NULL AND seq <> before + 1`,
      ),
    ).toBe('0');
    expect(
      psql(
        url,
        "SELECT count(*) FROM events WHERE turn_id = 'turn_foreign' AND type IN ('turn.completed', 'turn.cancelled')",
      ),
    ).toBe('1');
    expect(
      psql(url, `SELECT count(*) FROM events WHERE session_id = '${sessionId}' AND type = 'turn.completed'`),
    ).toBe('3'); // the first turn, the foreign one ended by recovery, the new one

    // The copy and the store hold the same session, byte for byte.
    const home = tempDir();
    const fromStore = await runCli(['export', '--store', url, '--session', sessionId], home);
    const fromCopy = await runCli(['export', '--db', second.dbPath, '--session', sessionId], home);
    expect(fromStore.exitCode, fromStore.stderr).toBe(0);
    expect(fromCopy.stdout).toBe(fromStore.stdout);
  });

  it("hands this node's clients the events brought in, in order, before the turn's end", async () => {
    const { service, url, sessionId, copied } = await sessionWithForeignTurn();
    const token = service.auth.token;
    const handshake = await jsonRequest(service.url, 'GET', `/sessions/${sessionId}`, undefined, { token });
    const watcher = await openClient(handshake.body.ws_url as string, {
      headers: { authorization: `Bearer ${token}` },
    });
    await subscribeOn(watcher, { filter: 'preset:full', snapshot: true });
    const store = new pg.Client({ connectionString: url, types: BIGINT_AS_NUMBER });
    await store.connect();
    onTestFinished(() => store.end());
    const takeOver = takeOverHere({
      trace: service.trace,
      runtime: service.runtime,
      sequencer: service.server.hub.sequencer,
      sessions: new SessionStore(service.trace.db),
      pricingVersion: 'test',
      logger: silentLogger(),
    });
    await takeOver(sessionId, (id) => readStoredSession(store, id));
    await service.trace.flush();
    const events = () => watcher.frames.filter((frame) => frame.type === 'event').map((frame) => frame.event);
    const foreign = () => events().filter((event) => event.turn_id === 'turn_foreign');
    const deadline = Date.now() + 10_000;
    while (!foreign().some((event) => event.type === 'turn.completed') && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 25));
    // Every event the other node stored, then the end this node's recovery gave the turn.
    const stored = service.trace.db
      .prepare("SELECT type FROM events WHERE turn_id = 'turn_foreign' ORDER BY id")
      .pluck()
      .all() as string[];
    expect(foreign().map((event) => event.type)).toEqual(stored);
    expect(foreign().filter((event) => event.type !== 'turn.completed').length).toBeGreaterThanOrEqual(
      copied.length,
    );
    const ids = events().map((event) => event.id as string);
    expect(ids).toEqual([...new Set(ids)].sort());
    watcher.close();
    await service.stop();
  });
});
