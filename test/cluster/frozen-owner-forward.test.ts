import { describe, expect, it } from 'vitest';
import { clusterRequest, startClusterNode } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * Issue 35, cause 7 (the forward): a request for a session whose owner froze (SIGSTOP) a moment before,
 * still alive by its last heartbeat, was forwarded to it and waited out the 35 s reply timeout before
 * a 409. The node forwarding now watches the owner's heartbeats: once it is silent, the request runs
 * here and the gate takes the session over.
 */

const pg = postgresForFile();

describe.skipIf(!postgresTestsRun || !natsTestsRun)('a request for a session whose owner froze', () => {
  it('is run by the node it reached once the owner is silent, not after the reply timeout', async () => {
    const nats = await startNats();
    try {
      const store = freshDatabase(pg);
      const a = await startClusterNode(store, nats.url, 'node-a');
      const b = await startClusterNode(store, nats.url, 'node-b');
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const first = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'hello' });
      expect(first.node).toBe('node-a');
      await new Promise((resolve) => setTimeout(resolve, 1_000)); // the turn is over
      a.process.kill('SIGSTOP');
      try {
        // Sent at once: node-a's last beat is recent, so node-b's gate still sees it alive and forwards.
        // The test's own timeout (25 s) is shorter than the 35 s a forward waited for its answer.
        const started = Date.now();
        const next = await clusterRequest(b.url, 'POST', `/sessions/${sessionId}/turns`, {
          message: 'again',
        });
        console.log(`answered ${next.status} by ${next.node} after ${Date.now() - started} ms`);
        expect(next.status, JSON.stringify(next.body)).toBe(202);
        expect(next.node).toBe('node-b');
      } finally {
        a.process.kill('SIGCONT');
      }
      await a.stop('SIGTERM');
      await b.stop('SIGTERM');
    } finally {
      await nats.destroy();
    }
  }, 25_000);
});
