import { describe, expect, it, onTestFinished } from 'vitest';
import { CLUSTER_TOKEN, clusterRequest, twoNodeCluster, until, watchSession } from '../helpers/cluster.js';
import { turnEnd } from '../helpers/following-client.js';
import { natsTestsRun } from '../helpers/nats.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35: any node answers for any session at once. A session created on node A after node B
 * started, which nobody on B has watched, is answered on B as on A by every GET route naming it, by
 * the session list, the usage chart, the store's figures, and by an attach. Real nats-server, PostgreSQL and `metis serve` nodes.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

/** The GET routes naming a session, with what differs between nodes by design taken out. */
const READS = ['', '/messages', '/trace', '/scores', '/budget', '/queue', '/confirmations'];

/** What a read answers, without the parts that name the node answering (an attach's ws_url, token). */
function comparable(path: string, body: any): unknown {
  if (path !== '' || body === null || typeof body !== 'object') return body;
  const { ws_url: _ws, attach_token: _token, expires_at: _expires, ...rest } = body;
  return rest;
}

/** An SSE stream's status and content type, its connection then closed. */
async function sseStatus(url: string, sessionId: string): Promise<[number, string | null]> {
  const controller = new AbortController();
  const response = await fetch(`${url}/sessions/${sessionId}/events?snapshot=true`, {
    headers: { authorization: `Bearer ${CLUSTER_TOKEN}`, accept: 'text/event-stream' },
    signal: controller.signal,
  });
  controller.abort();
  return [response.status, response.headers.get('content-type')];
}

inCluster('a session created on another node', () => {
  it('is answered by every route on a node that never saw it, as on the node that made it', async () => {
    const { a, b, store } = await twoNodeCluster(pg);
    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
      message: 'hello there',
    });
    expect(turn.status).toBe(202);
    await until(
      async () =>
        (await clusterRequest(a.url, 'GET', `/sessions/${sessionId}/trace`)).body.events.some(
          turnEnd(turn.body.turn_id),
        ),
      'the turn to end on A',
    );
    // A shows its turn's end once its copy holds it; B reads the list from PostgreSQL, which holds it
    // once A's next shipment lands.
    const dbName = new URL(store).pathname.slice(1);
    await until(
      async () =>
        pg
          .psql(
            `SELECT count(*) FROM events WHERE turn_id = '${turn.body.turn_id}' AND type = 'turn.completed'`,
            dbName,
          )
          .trim() === '1',
      'the turn end shipped to PostgreSQL',
    );

    // B first, so that nothing on B has brought the session in before the read under test.
    const listed = await clusterRequest(b.url, 'GET', '/sessions');
    expect(listed.status).toBe(200);
    const row = listed.body.sessions.find((s: { id: string }) => s.id === sessionId);
    expect(row).toMatchObject({
      title: 'hello there',
      title_source: 'first_message',
      turn_count: 1,
      last_turn_status: 'completed',
      status: 'active',
      tags: [],
    });
    expect(row.tokens.output).toBeGreaterThan(0);
    expect(row.latency_ms).not.toBeNull();
    const ids = async (query: string) =>
      (await clusterRequest(b.url, 'GET', `/sessions?${query}`)).body.sessions.map(
        (s: { id: string }) => s.id,
      );
    expect(await ids('q=hel')).toEqual([sessionId]);
    expect(await ids('q=nowhere')).toEqual([]);
    expect(await ids('turn_status=completed')).toEqual([sessionId]);
    expect(await ids('turn_status=failed')).toEqual([]);
    // The usage chart counts the calls made on A, though B holds none of them.
    const usage = await clusterRequest(b.url, 'GET', '/stats/usage');
    expect(usage.status).toBe(200);
    expect(
      usage.body.rows.reduce((sum: number, row: { calls: number }) => sum + row.calls, 0),
    ).toBeGreaterThan(0);
    // So do the store's figures.
    const stats = await clusterRequest(b.url, 'GET', '/store/stats');
    expect(stats.status).toBe(200);
    expect(stats.body.db_path).toMatch(/^postgres:\/\//);
    const turnsStored = stats.body.by_type.find((row: { type: string }) => row.type === 'turn.completed');
    expect(turnsStored?.count).toBe(1);
    for (const path of READS) {
      const onB = await clusterRequest(b.url, 'GET', `/sessions/${sessionId}${path}`);
      const onA = await clusterRequest(a.url, 'GET', `/sessions/${sessionId}${path}`);
      expect({ path, status: onB.status }).toEqual({ path, status: onA.status });
      expect(comparable(path, onB.body), path).toEqual(comparable(path, onA.body));
    }
    expect(await sseStatus(b.url, sessionId)).toEqual(await sseStatus(a.url, sessionId));
    const watcher = await watchSession(b.url, sessionId);
    onTestFinished(() => watcher.client.close());
    const snapshot = watcher.client.frames.find((frame) => frame.type === 'snapshot');
    expect(JSON.stringify(snapshot)).toContain('hello');
    // A change sent to B runs on A, the owner.
    const next = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'again' });
    expect(next.status).toBe(202);
    expect(next.node).toBe('node-a');
    await until(() => watcher.events().some(turnEnd(next.body.turn_id)), 'the next turn to end on B');

    // The reads B answers from PostgreSQL, while it is away: 503 naming the store, not a 500.
    await pg.stop('fast');
    try {
      for (const path of ['/sessions', '/stats/usage']) {
        const away = await clusterRequest(b.url, 'GET', path);
        expect({ path, status: away.status, code: away.body.error?.code }).toEqual({
          path,
          status: 503,
          code: 'METIS_ERR_STORE_UNAVAILABLE',
        });
        expect(away.body.error.message).toMatch(/PostgreSQL store .* is unreachable/);
        expect(away.body.error.message).not.toContain('secret');
      }
    } finally {
      await pg.start();
    }
  }, 120_000);
});
