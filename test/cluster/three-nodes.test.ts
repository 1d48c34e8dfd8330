import { describe, expect, it } from 'vitest';
import { clusterKeys } from '../../src/core/cluster/cluster-keys.js';
import { signForward } from '../../src/core/cluster/forwarded-proof.js';
import { CLUSTER_TOKEN, clusterRequest, nodeBroker, startClusterNode } from '../helpers/cluster.js';
import { type NatsServer, natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { type FilterInput, subscribeOn, subscribeReply } from '../helpers/protocol.js';
import { runCli } from '../helpers/run-cli.js';
import { openClient, type TestClient } from '../helpers/server.js';

/**
 * Issue 20: three `metis serve` nodes on one PostgreSQL store and one nats-server, as child processes.
 * A client attached to one node sees a turn another node runs exactly as a client of that node does,
 * and a request sent to a node that does not run the session is run by the one that does.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

async function withCluster<T>(
  work: (parts: {
    store: string;
    nats: NatsServer;
    nodes: Awaited<ReturnType<typeof startClusterNode>>[];
  }) => Promise<T>,
): Promise<T> {
  const nats = await startNats();
  try {
    const store = freshDatabase(pg);
    const nodes = [];
    for (const id of ['node-a', 'node-b', 'node-c']) nodes.push(await startClusterNode(store, nats.url, id));
    return await work({ store, nats, nodes });
  } finally {
    await nats.destroy();
  }
}

/** Handshake with `url` for the session, a WebSocket, and a full-preset subscription with a snapshot. */
async function attachTo(
  url: string,
  sessionId: string,
  since: string | null = null,
  filter: FilterInput = 'preset:full',
) {
  const handshake = await clusterRequest(url, 'GET', `/sessions/${sessionId}`);
  expect(handshake.status).toBe(200);
  const client = await openClient(handshake.body.ws_url as string, {
    headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
  });
  // With a cursor the client resumes (a replay); without, it starts from a snapshot.
  return subscribeOn(client, { filter, since, snapshot: since === null });
}

/** Matches the event frame that completes the turn. */
const completed = (turnId: string) => (frame: any) =>
  frame.type === 'event' && frame.event.turn_id === turnId && frame.event.type === 'turn.completed';

/** A client's events, each as the JSON it came as, in the order received. */
const eventsOf = (client: TestClient) =>
  client.frames.filter((frame) => frame.type === 'event').map((frame) => JSON.stringify(frame.event));

inCluster('three metis serve nodes on one store', () => {
  it('start together, each naming the others as peers', async () => {
    await withCluster(async ({ nodes }) => {
      // The last to start sees the first two at once.
      expect(nodes[2]!.banner.peers.map((peer) => peer.node_id).sort()).toEqual(['node-a', 'node-b']);
      for (const node of nodes) {
        const health = await clusterRequest(node.url, 'GET', '/healthz');
        expect(health.body).toMatchObject({
          status: 'ok',
          store: { state: 'ok' },
          broker: { state: 'connected' },
        });
      }
    });
  });

  it('metis conformance run passes with its client on node C and every turn on node A', async () => {
    await withCluster(async ({ store, nodes }) => {
      const [a, , c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
      const run = await runCli(
        ['conformance', 'run', '--url', c.url, '--sessions-url', a.url, '--json'],
        c.home,
        { METIS_TOKEN: CLUSTER_TOKEN },
      );
      if (run.exitCode !== 0) console.log(run.stdout.slice(0, 20_000), run.stderr.slice(0, 5_000));
      const results = JSON.parse(run.stdout).results as {
        name: string;
        outcome: { status: string; reason?: string };
      }[];
      const failed = results.filter((result) => result.outcome.status === 'fail');
      expect(failed, JSON.stringify(failed, null, 2)).toEqual([]);
      expect(run.exitCode).toBe(0);
      const passed = results.filter((result) => result.outcome.status === 'pass').length;
      console.log(
        `conformance through node C, sessions on node A: ${passed} passed, ${failed.length} failed, ${results.length - passed - failed.length} skipped`,
      );
      // Only the checks that need the --conformance hooks (not served by a production node) skip.
      for (const skipped of results.filter((result) => result.outcome.status === 'skip'))
        expect(skipped.outcome.reason).toMatch(/hook|--conformance/);
      expect(passed).toBeGreaterThanOrEqual(16);
      // Every session the suite made is A's: its turns ran there while the client was on C.
      const status = await runCli(['cluster', 'status', '--store', store, '--json'], c.home);
      const leases = JSON.parse(status.stdout).leases as { node_id: string }[];
      expect(leases.length).toBeGreaterThan(5);
      expect(new Set(leases.map((lease) => lease.node_id))).toEqual(new Set(['node-a']));
    });
  }, 300_000);

  it('a node that loses the broker ends the streams it fed from other nodes with a named error; they resume once it is back', async () => {
    await withCluster(async ({ nats, nodes }) => {
      const [a, , c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const onA = await attachTo(a.url, sessionId);
      const onC = await attachTo(c.url, sessionId);
      const first = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'one' });
      const endOf = completed;
      await onC.client.waitFor(endOf(first.body.turn_id), 20_000);
      await nats.stop();
      const error = await onC.client.waitFor((frame) => frame.type === 'error', 20_000);
      expect(error.code).toBe('broker_unavailable');
      expect((await onC.client.closed).code).toBe(1013);
      // A's own session goes on, for A's own client.
      const second = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'two' });
      expect(second.status).toBe(202);
      await onA.client.waitFor(endOf(second.body.turn_id), 20_000);
      // C will not hand out a stream it cannot feed.
      const refused = await clusterRequest(c.url, 'GET', `/sessions/${sessionId}`);
      expect(refused.status).toBe(503);
      expect(refused.body.error.code).toBe('METIS_ERR_BROKER_UNREACHABLE');
      await nats.start();
      // Back: C serves the session again. A cursor from before the outage asks for deltas C never
      // received, which it says (cursor_expired, streaming §3.6); the snapshot then holds the turn missed.
      const cursor = onC.client.events().at(-1).id as string;
      const deadline = Date.now() + 20_000;
      for (;;) {
        const handshake = await clusterRequest(c.url, 'GET', `/sessions/${sessionId}`);
        if (handshake.status === 200) break;
        if (Date.now() > deadline) throw new Error(`C did not come back: ${JSON.stringify(handshake.body)}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const handshake = await clusterRequest(c.url, 'GET', `/sessions/${sessionId}`);
      const again = await openClient(handshake.body.ws_url as string, {
        headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
      });
      const reply = await subscribeReply(again, { filter: 'preset:full', since: cursor, snapshot: false });
      let resumed = again;
      if (reply.type === 'subscribe_error') {
        expect(reply.code).toBe('cursor_expired');
        const fresh = await attachTo(c.url, sessionId);
        expect(fresh.snapshot.session.turn_count).toBe(2);
        expect(JSON.stringify(fresh.snapshot.messages)).toContain('You said: two');
        resumed = fresh.client;
      } else await again.waitFor(endOf(second.body.turn_id), 20_000);
      // A too is back on the broker (it answers C's forwarded request there).
      while ((await clusterRequest(a.url, 'GET', '/healthz')).body.broker.state !== 'connected')
        await new Promise((resolve) => setTimeout(resolve, 100));
      const third = await clusterRequest(c.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'three' });
      expect(third.node).toBe('node-a');
      await resumed.waitFor(endOf(third.body.turn_id), 20_000);
      const ids = resumed.events().map((event) => event.id as string);
      expect(ids).toEqual([...new Set(ids)].sort());
    });
  }, 120_000);

  it('a delegated turn on A, workers included, reaches a client on C as it reaches one on A', async () => {
    await withCluster(async ({ nodes }) => {
      const [a, , c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const everything = { event_types: null, actors: null, include_worker_sessions: true };
      const onA = await attachTo(a.url, sessionId, null, everything);
      const onC = await attachTo(c.url, sessionId, null, everything);
      const turn = await clusterRequest(c.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'delegate: count the files',
      });
      expect(turn.status).toBe(202);
      const ended = completed(turn.body.turn_id as string);
      await onA.client.waitFor(ended, 30_000);
      await onC.client.waitFor(ended, 30_000);
      const seenOnC = eventsOf(onC.client);
      expect(seenOnC.some((event) => JSON.parse(event).session_id !== sessionId)).toBe(true);
      expect(seenOnC).toEqual(eventsOf(onA.client));
      // Nothing was emitted by C into A's sessions (a resume would have been).
      expect(seenOnC.filter((event) => JSON.parse(event).type === 'session.resumed')).toEqual([]);
    });
  });

  it('a node answers forwarded requests only for session paths on itself', async () => {
    await withCluster(async ({ nats }) => {
      // Signed and sealed as node C would (broker-proof.test.ts has what happens without the token).
      const broker = await nodeBroker(nats.url);
      const key = clusterKeys(CLUSTER_TOKEN).forwarding;
      for (const url of ['http://evil.example/sessions/sess_x/turns', '/patterns/clear', '/healthz']) {
        const signed = signForward(key, 'node-c', 'node-a', { method: 'POST', url, body: '{}' });
        const answer = JSON.parse(
          await broker.request('metis.node.node-a.http', JSON.stringify(signed), 5_000),
        );
        expect(answer.status, url).toBe(400);
        expect(answer.node).toBe('node-a');
      }
    });
  });

  it("a client on node C sees node A's turn as a client on A does, and C forwards the turn to A", async () => {
    await withCluster(async ({ store, nodes }) => {
      const [a, , c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const onA = await attachTo(a.url, sessionId);
      const onC = await attachTo(c.url, sessionId);
      // Sent to C, run by A: C does not run A's session, it forwards the request.
      const turn = await clusterRequest(c.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'hello there',
      });
      expect(turn.status).toBe(202);
      expect(turn.node).toBe('node-a');
      const turnId = turn.body.turn_id as string;
      const ended = completed(turnId);
      await onA.client.waitFor(ended, 20_000);
      await onC.client.waitFor(ended, 20_000);
      // Both families, in the same order, byte for byte.
      expect(eventsOf(onC.client)).toEqual(eventsOf(onA.client));
      expect(eventsOf(onC.client).some((event) => JSON.parse(event).seq === null)).toBe(true);
      // And the stored ones are the store's.
      const exported = await runCli(['export', '--store', store, '--session', sessionId], c.home);
      expect(exported.exitCode, exported.stderr).toBe(0);
      const storedIds = exported.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line).id as string);
      const busOnC = eventsOf(onC.client)
        .map((event) => JSON.parse(event))
        .filter((event) => event.seq !== null)
        .map((event) => event.id as string);
      expect(storedIds.slice(-busOnC.length)).toEqual(busOnC);
      // The lease stayed with A.
      const status = await runCli(['cluster', 'status', '--store', store, '--json'], c.home);
      expect(JSON.parse(status.stdout).leases).toEqual([
        expect.objectContaining({ session_id: sessionId, node_id: 'node-a', held: true }),
      ]);
    });
  });
});
