import { describe, expect, it } from 'vitest';
import { type ClusterTestNode, clusterRequest, startClusterNode } from '../helpers/cluster.js';
import { accountFor, FollowingClient, seeded, turnEnd, turnOutcome } from '../helpers/following-client.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';

/**
 * Issue 20 point 3 and 5: three nodes, a turn running on one while a client follows it on another, and
 * a random node killed (SIGKILL) at a random moment of the turn. Whatever was killed, the client (which
 * reconnects to a live node with its cursor when its own node dies) ends up with every stored event of
 * the session after its snapshot exactly once, in id order, and nothing the store does not hold; the
 * turn completes (resumed by the node that takes the session over when its node died, issue 31), and
 * the session's next turn is
 * served by a node still alive. Then the killed node starts again under its name, and the next round
 * begins. The seed is printed, and METIS_KILL_SEED replays a run.
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

inCluster('a node killed at a random moment of a turn', () => {
  it('loses, repeats and invents no stored event for a client on another node; the session goes on elsewhere', async () => {
    const seed = Number(process.env.METIS_KILL_SEED ?? Date.now() % 1_000_000);
    console.log(`node-kill seed ${seed} (METIS_KILL_SEED=${seed} replays it)`);
    const random = seeded(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const nats = await startNats();
    try {
      const store = freshDatabase(pg);
      const nodes: ClusterTestNode[] = [];
      for (const id of ['node-a', 'node-b', 'node-c'])
        nodes.push(await startClusterNode(store, nats.url, id));
      const dead = new Set<string>();
      const alive = () => nodes.filter((node) => !dead.has(node.nodeId));
      const kinds = new Set<string>();
      for (let round = 0; round < 4; round += 1) {
        const owner = pick(nodes);
        const watcher = pick(nodes.filter((node) => node !== owner));
        const victim =
          round < 3
            ? [owner, watcher, nodes.find((n) => n !== owner && n !== watcher)!][round]!
            : pick(nodes);
        const killAfterMs = Math.floor(random() * 2_500);
        const what = `round ${round}: turn on ${owner.nodeId}, client on ${watcher.nodeId}, ${victim.nodeId} killed after ${killAfterMs} ms`;
        kinds.add(victim === owner ? 'owner' : victim === watcher ? 'watcher' : 'other');
        const sessionId = (await clusterRequest(owner.url, 'POST', '/sessions', {})).body
          .session_id as string;
        const client = new FollowingClient(sessionId, alive);
        await client.attach(watcher, null);
        const turn = await clusterRequest(watcher.url, 'POST', `/sessions/${sessionId}/turns`, {
          message: 'slow: a long answer',
        });
        expect(turn.status, what).toBe(202);
        expect(turn.node, what).toBe(owner.nodeId);
        await new Promise((resolve) => setTimeout(resolve, killAfterMs));
        victim.process.kill('SIGKILL');
        await victim.exited();
        dead.add(victim.nodeId);
        const ended = await client.waitFor(
          turnEnd(turn.body.turn_id as string),
          `the end of the turn (${what})`,
        );
        // A killed owner's turn goes on on the node that takes the session over (runtime.on_restart:
        // resume, the default; take-over-resume.test.ts checks `fail`); any other kill leaves it be.
        expect(turnOutcome(ended), what).toBe('completed');
        // The session's next turn, sent to a live node, is run by a live node.
        const target = pick(alive());
        const next = await clusterRequest(target.url, 'POST', `/sessions/${sessionId}/turns`, {
          message: 'still there?',
        });
        expect(next.status, `${what}: ${JSON.stringify(next.body)}`).toBe(202);
        expect(
          alive().map((node) => node.nodeId),
          what,
        ).toContain(next.node ?? target.nodeId);
        await client.waitFor(turnEnd(next.body.turn_id as string), `the end of the next turn (${what})`);
        client.close();

        // The accounting: the store's events after the client's snapshot, against what it received.
        const exported = await runCli(['export', '--store', store, '--session', sessionId], alive()[0]!.home);
        expect(exported.exitCode, exported.stderr).toBe(0);
        const stored = exported.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { id: string; seq: number });
        const expected = stored.filter((event) => event.id > client.snapshotAt!);
        const received = client.events.filter((event) => event.seq !== null);
        const { lost, duplicated, unexpected } = accountFor(client, stored);
        expect({ lost, duplicated, unexpected }, what).toEqual({ lost: [], duplicated: [], unexpected: [] });
        console.log(
          `${what}: ${expected.length} stored events after the snapshot, ${received.length} received, ` +
            `${client.reconnects} reconnect(s); lost ${lost.length}, duplicated ${duplicated.length}, unexpected ${unexpected.length}`,
        );
        // Both families in id order, each event once, across the reconnects.
        const all = client.events.map((event) => event.id as string);
        expect(all, what).toEqual([...new Set(all)].sort());
        // The store's seq is whole: 1..n with no repeat.
        expect(
          stored.map((event) => event.seq),
          what,
        ).toEqual(stored.map((_, index) => index + 1));

        // The killed node comes back under its name (its data folder kept), for the next round.
        const index = nodes.indexOf(victim);
        nodes[index] = await startClusterNode(store, nats.url, victim.nodeId, { home: victim.home });
        dead.delete(victim.nodeId);
      }
      expect([...kinds].sort()).toEqual(['other', 'owner', 'watcher']);
      for (const node of nodes) await node.stop('SIGTERM');
    } finally {
      await nats.destroy();
    }
  }, 300_000);
});
