import { describe, expect, it, onTestFinished } from 'vitest';
import { clusterRequest, startClusterNode, twoNodeCluster, until } from '../helpers/cluster.js';
import { natsTestsRun } from '../helpers/nats.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35 (any node answers for any session; titles were kept per node): a title set through any node
 * is the session's, in the store. Set through node B for a session node A runs (and B never read), it
 * is answered 200, written by the owner, listed and found by `q=` on both nodes, and still there for a
 * node started after it.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

inCluster('a session title on a cluster', () => {
  it('set through any node, is listed and searched on every node', async () => {
    const { nats, store, a, b } = await twoNodeCluster(pg);
    const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;

    const patched = await clusterRequest(b.url, 'PATCH', `/sessions/${sessionId}`, {
      title: 'Quarterly ocelot census',
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.node).toBe('node-a');
    expect(patched.body).toMatchObject({
      id: sessionId,
      title: 'Quarterly ocelot census',
      title_source: 'user',
    });

    const listedOn = async (url: string, query = '') =>
      (
        (await clusterRequest(url, 'GET', `/sessions${query}`)).body.sessions as {
          id: string;
          title: string;
        }[]
      )
        .filter((row) => row.id === sessionId)
        .map((row) => row.title);
    for (const node of [a, b]) {
      await until(
        async () => (await listedOn(node.url)).join() === 'Quarterly ocelot census',
        `the title listed on ${node.nodeId}`,
      );
      expect(await listedOn(node.url, '?q=ocelot')).toEqual(['Quarterly ocelot census']);
    }

    const c = await startClusterNode(store, nats.url, 'node-c');
    onTestFinished(async () => {
      await c.stop('SIGTERM');
    });
    expect(await listedOn(c.url, '?q=census')).toEqual(['Quarterly ocelot census']);
    // Cleared through C: the list falls back to the first message (none: no title).
    const cleared = await clusterRequest(c.url, 'PATCH', `/sessions/${sessionId}`, { title: null });
    expect(cleared.status).toBe(200);
    await until(async () => (await listedOn(b.url, '?q=census')).length === 0, 'the title gone on B');
  }, 120_000);
});
