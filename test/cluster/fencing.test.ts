import { describe, expect, it } from 'vitest';
import { clusterRequest, startClusterNode, until } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';

/**
 * Issue 20: a node cut off for longer than the node timeout while running a turn (here: frozen with
 * SIGSTOP) has its session taken by another node, which closes the turn. When it wakes, what it does in
 * that session is fenced off its shipments (the lease names the other node), its turn is cancelled, and
 * its next request for the session goes to the new owner. The store's seq stays whole.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

inCluster('a node cut off while running a turn', () => {
  it('ships nothing more of a session another node has taken since, and gives the session up', async () => {
    const nats = await startNats();
    try {
      const store = freshDatabase(pg);
      const a = await startClusterNode(store, nats.url, 'node-a');
      const b = await startClusterNode(store, nats.url, 'node-b');
      const sessionId = (await clusterRequest(a.url, 'POST', '/sessions', {})).body.session_id as string;
      const turn = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: long',
      });
      expect(turn.status).toBe(202);
      const stored = async () => {
        const exported = await runCli(['export', '--store', store, '--session', sessionId], b.home);
        expect(exported.exitCode, exported.stderr).toBe(0);
        return exported.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { type: string; seq: number; turn_id: string | null });
      };
      await until(
        async () => (await stored()).some((event) => event.type === 'llm.call_started'),
        'the turn under way',
      );
      a.process.kill('SIGSTOP');
      // B takes the session the silent node left with a turn open, and closes the turn.
      const ends = (events: { type: string; turn_id: string | null }[]) =>
        events.filter(
          (event) => event.turn_id === turn.body.turn_id && /^turn\.(completed|cancelled)$/.test(event.type),
        );
      await until(async () => ends(await stored()).length > 0, "B closing A's turn");
      a.process.kill('SIGCONT');
      // A wakes and runs on (its slow turn lasts about 3 s more); each shipment finds the session B's.
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const forwarded = await clusterRequest(a.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'who?',
      });
      expect(forwarded.status).toBe(202);
      expect(forwarded.node).toBe('node-b');
      await until(
        async () =>
          (await stored()).some(
            (event) => event.turn_id === forwarded.body.turn_id && event.type === 'turn.completed',
          ),
        'the next turn, on B',
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const events = await stored();
      expect(ends(events)).toHaveLength(1);
      expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
      expect(a.stderr()).toContain('another node runs these sessions now');
      await a.stop('SIGTERM');
      await b.stop('SIGTERM');
    } finally {
      await nats.destroy();
    }
  }, 120_000);
});
