import { describe, expect, it } from 'vitest';
import { type ClusterTestNode, clusterRequest, startClusterNode } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { readUntil } from '../helpers/protocol.js';

/*
 * Issue 31 on a cluster: a session's budget travels with it. A turn held at its cap on node A; A is
 * SIGKILLed; node B takes the session over, resumes the turn and holds it again at the same cap and
 * spend (read from the session's row in PostgreSQL); a raise sent to B lets it complete.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

/** A dollar a token: a cap of 1 USD is crossed by the first call. */
const DOLLAR_A_TOKEN = {
  pricing: { 'scripted:*': { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } },
};

inCluster('a budget on a cluster (issue 31)', () => {
  it('a turn held at its cap on a node killed is held again by the node taking over, and completes after a raise', async () => {
    const nats = await startNats();
    const nodes: ClusterTestNode[] = [];
    try {
      const store = freshDatabase(pg);
      for (const id of ['node-a', 'node-b'])
        nodes.push(await startClusterNode(store, nats.url, id, { runtime: DOLLAR_A_TOKEN }));
      const [a, b] = nodes as [ClusterTestNode, ClusterTestNode];
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', { budget: { usd: 1 } })).body
        .session_id as string;
      const budgetOn = async (node: ClusterTestNode) =>
        (await clusterRequest(node.url, 'GET', `/sessions/${sessionId}/budget`)).body;
      const current = async (node: ClusterTestNode) =>
        (await clusterRequest(node.url, 'GET', `/sessions/${sessionId}`)).body.session?.current_turn_id ??
        null;
      await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'hello' });
      await readUntil(
        () => current(a),
        (turn) => turn === null,
      );
      const held = (await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'again' }))
        .body.turn_id as string;
      const before = await readUntil(
        () => budgetOn(a),
        (budget) => budget.paused?.length === 1,
      );
      expect(before.paused[0]).toMatchObject({ turn_id: held, measure: 'usd', cap: 1 });

      a.process.kill('SIGKILL');
      await a.exited();
      const after = await readUntil(
        () => budgetOn(b).catch(() => ({})),
        (budget: any) => budget.paused?.length === 1,
        30_000,
      );
      expect(after.session).toEqual(before.session);
      expect(after.paused[0]).toMatchObject({ turn_id: held, measure: 'usd', cap: 1 });

      const raised = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/budget`, { usd: 1_000 });
      expect(raised.status).toBe(200);
      expect(
        await readUntil(
          () => current(b),
          (turn) => turn === null,
        ),
      ).toBeNull();
    } finally {
      for (const node of nodes.slice(1)) await node.stop('SIGTERM').catch(() => {});
      await nats.destroy();
    }
  }, 60_000);
});
