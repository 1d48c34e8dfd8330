import { describe, expect, it } from 'vitest';
import { clusterRequest, startClusterNode, until, watchSession } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35, cause 5: a node killed in a turn and started again within the node timeout (its leases still
 * its own) closes the turn in the store as crash recovery does, but published nothing of it: clients on
 * other nodes showed the turn running until some later event of the session made them look again. The
 * recovery's events now reach them as every other event does.
 */

const pg = postgresForFile();

describe.skipIf(!postgresTestsRun || !natsTestsRun)('a node started again within the node timeout', () => {
  it("tells the other nodes' clients how its cut turns ended", async () => {
    const nats = await startNats();
    try {
      const store = freshDatabase(pg);
      // A timeout long enough that node-b never takes node-a's session over: only the restart closes it.
      const timing = { nodeTimeoutMs: 60_000 };
      let a = await startClusterNode(store, nats.url, 'node-a', timing);
      const b = await startClusterNode(store, nats.url, 'node-b', timing);
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const { client, events } = await watchSession(b.url, sessionId);
      const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: long',
      });
      expect(turn.status).toBe(202);
      const turnId = turn.body.turn_id as string;
      await until(
        async () => events().some((event) => event.type === 'text.delta'),
        'the turn streaming on node-b',
      );

      a.process.kill('SIGKILL');
      await a.exited();
      a = await startClusterNode(store, nats.url, 'node-a', { ...timing, home: a.home });
      // Nothing else happens in the session: the end must come from the restart itself.
      await until(
        async () =>
          events().some(
            (event) =>
              event.turn_id === turnId &&
              (event.type === 'turn.completed' || event.type === 'turn.cancelled'),
          ),
        "the cut turn's end on node-b",
        20_000,
      );
      const stored = events().filter((event) => event.seq !== null);
      expect(stored.map((event) => event.seq)).toEqual(
        [...stored.map((event) => event.seq)].sort((x, y) => x - y),
      );
      client.close();
      await a.stop('SIGTERM');
      await b.stop('SIGTERM');
    } finally {
      await nats.destroy();
    }
  }, 120_000);
});
