import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { takeOverSession } from '../../src/core/cluster/take-over.js';
import { newEventId } from '../../src/core/events/ids.js';
import { silentLogger } from '../../src/core/logger.js';
import type { RunningService } from '../../src/core/server/serve.js';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
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

describe.skipIf(!postgresTestsRun)('taking a session over', () => {
  it("brings the other node's events in, closes its open turn, and continues seq and ids after them", async () => {
    const url = freshDatabase(server);
    const service = await serveOnStore(url, tempDir());
    const created = await jsonRequest(service.url, 'POST', '/sessions', {}, { token: service.auth.token });
    const sessionId = created.body.session_id as string;
    // This node ran the session (its bus and runtime remember it) before another node took it over.
    await turn(service, sessionId, 'hello');
    await service.trace.flush();
    expect(await service.trace.upstream!.whenShipped(10_000)).toBe(true);

    // The other node ran a turn of the session and died in it: its events are in the store, without the
    // turn's end (copies of the first turn's events, after them in id and seq).
    const firstTurn = psql(
      url,
      `SELECT turn_id FROM events WHERE session_id = '${sessionId}' AND type = 'turn.started'`,
    );
    const copied = psql(
      url,
      `SELECT id FROM events WHERE turn_id = '${firstTurn}' AND type NOT IN ('turn.completed', 'turn.cancelled') ORDER BY id`,
    ).split('\n');
    const values = copied.map((id, k) => `('${id}', '${newEventId()}', ${k + 1})`).join(', ');
    psql(
      url,
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       SELECT e.session_id, m.new_id, (SELECT max(seq) FROM events WHERE session_id = '${sessionId}') + m.k,
              (extract(epoch from clock_timestamp()) * 1000000)::bigint, 'turn_foreign', NULL, e.type, e.actor, e.sensitivity, e.payload_json
         FROM (VALUES ${values}) AS m(old_id, new_id, k) JOIN events e ON e.id = m.old_id ORDER BY m.k`,
    );

    const second = service;
    const local = () =>
      second.trace.db
        .prepare("SELECT count(*) FROM events WHERE turn_id = 'turn_foreign'")
        .pluck()
        .get() as number;
    expect(local()).toBe(0);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    onTestFinished(() => client.end());
    const report = await takeOverSession(
      {
        client,
        trace: second.trace,
        runtime: second.runtime,
        pricingVersion: 'test',
        logger: silentLogger(),
      },
      sessionId,
    );
    expect(report).toEqual({ added: copied.length, recoveredTurns: 1 });
    expect(local()).toBeGreaterThan(copied.length); // brought in, and closed
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
    // What the runtime knew of the session was dropped and read again: the foreign turn counts.
    expect(
      psql(
        url,
        `SELECT payload_json::json->>'turn_count' FROM events WHERE session_id = '${sessionId}' AND type = 'session.ended'`,
      ),
    ).toBe('3');

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
});
