import { describe, expect, it, onTestFinished } from 'vitest';
import {
  CLUSTER_TOKEN,
  type ClusterTestNode,
  clusterRequest,
  startClusterNode,
  until,
} from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Where a request naming a session runs in a cluster is each route's own declaration (`placement`), not
 * a guess from its path: the confirmations a turn waits on are read on the node running it, and an
 * AG-UI run, whose answer streams, is refused elsewhere naming that node instead of being forwarded.
 * Real nats-server, PostgreSQL and `metis serve` nodes.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

inCluster('session placement of routes', () => {
  it('reads confirmations on the owner, and refuses an AG-UI run elsewhere naming the owner', async () => {
    const nats = await startNats();
    onTestFinished(() => nats.destroy());
    const store = freshDatabase(pg);
    const a = await startClusterNode(store, nats.url, 'node-a');
    const b: ClusterTestNode = await startClusterNode(store, nats.url, 'node-b');

    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
    const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
      message: 'run: echo placed',
    });
    expect(turn.status).toBe(202);
    await until(
      async () =>
        (await clusterRequest(a.url, 'GET', `/sessions/${sessionId}/confirmations`)).body.confirmations
          .length === 1,
      'the confirmation to be asked',
    );

    // Through B: the question lives in A's memory, so B forwards the read and A answers it.
    const listed = await clusterRequest(b.url, 'GET', `/sessions/${sessionId}/confirmations`);
    expect(listed.status).toBe(200);
    expect(listed.node).toBe('node-a');
    expect(listed.body.confirmations).toHaveLength(1);

    // An AG-UI run through B is not forwarded (its answer streams): B names the node to ask.
    const response = await fetch(`${b.url}/sessions/${sessionId}/ag-ui`, {
      method: 'POST',
      headers: { authorization: `Bearer ${CLUSTER_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        threadId: sessionId,
        runId: 'run-placement',
        state: null,
        messages: [{ id: 'm1', role: 'user', content: 'hello' }],
        tools: [],
        context: [],
        forwardedProps: null,
      }),
    });
    expect(response.headers.get('metis-node')).toBeNull();
    const refused = (await response.json()) as { error: { code: string; message: string } };
    expect(refused.error.code).toBe('METIS_ERR_SESSION_ELSEWHERE');
    expect(refused.error.message).toContain('node-a');
  }, 120_000);
});
