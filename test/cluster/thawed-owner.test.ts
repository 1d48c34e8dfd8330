import { describe, expect, it } from 'vitest';
import { clusterRequest, startClusterNode, until, watchSession } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35, cause 7 (the zombie): a node frozen (SIGSTOP) past the node timeout in a turn has its session
 * taken by another node, which closes the turn. Thawed, it went on streaming the turn's deltas to every
 * node until its next shipment met the fence: clients saw a closed turn go on. A thawed node no longer
 * trusts its leases until the store confirms them, and publishes no streaming event of a session it
 * does not hold.
 */

const pg = postgresForFile();

describe.skipIf(!postgresTestsRun || !natsTestsRun)('a frozen owner thawed after its session moved', () => {
  it("streams nothing more of the turn another node closed to the other nodes' clients", async () => {
    const nats = await startNats();
    try {
      const store = freshDatabase(pg);
      const a = await startClusterNode(store, nats.url, 'node-a');
      const b = await startClusterNode(store, nats.url, 'node-b');
      const c = await startClusterNode(store, nats.url, 'node-c');
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const { client, events } = await watchSession(c.url, sessionId);
      const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: long',
      });
      expect(turn.status).toBe(202);
      const turnId = turn.body.turn_id as string;
      const isDelta = (event: any) => event.type === 'text.delta' && event.turn_id === turnId;
      await until(() => events().some(isDelta), 'the turn streaming on node-c');

      a.process.kill('SIGSTOP');
      const isEnd = (event: any) =>
        event.turn_id === turnId && (event.type === 'turn.completed' || event.type === 'turn.cancelled');
      // Another node takes the session over and closes the turn (the node timeout is 1 s).
      await until(() => events().some(isEnd), 'the turn closed by another node', 20_000);
      const endedAt = events().findIndex(isEnd);
      a.process.kill('SIGCONT');
      // Long enough for the thawed node to send what its turn goes on streaming (25 ms a delta).
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const after = events()
        .slice(endedAt + 1)
        .filter(isDelta);
      expect(after.length, `deltas after the turn's end: ${after.length}`).toBe(0);
      client.close();
      for (const node of [a, b, c]) await node.stop('SIGTERM');
    } finally {
      await nats.destroy();
    }
  }, 90_000);
});
