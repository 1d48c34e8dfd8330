import { describe, expect, it } from 'vitest';
import { type ClusterTestNode, clusterRequest, startClusterNode } from '../helpers/cluster.js';
import { accountFor, FollowingClient, seeded, turnEnd } from '../helpers/following-client.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';

/**
 * Issue 35, "Bad input and faults": the Jepsen-style run. Three nodes on one PostgreSQL store and one
 * nats-server; each round starts a slow turn in each of three sessions, each session followed by two
 * clients on random nodes (a client whose connection closes resumes from its cursor on any live node),
 * and injects one fault at a random moment of the turns: a node SIGKILLed (and started again), a node
 * SIGSTOPped past the node timeout (then continued), nats-server stopped for 1-4 s, PostgreSQL crashed
 * (immediate shutdown) for 1-4 s. After the turns and one more turn per session, every client is
 * accounted for against the store: nothing lost, duplicated or unexpected, ids increasing on every
 * connection; the store's seq is whole per session, every turn ended exactly once, and no node but the
 * one killed exited. The seed is printed; METIS_FAULT_SEED replays a run and METIS_FAULT_ROUNDS makes
 * it longer (the default runs each fault once).
 */

const pg = postgresForFile();
const inCluster = describe.skipIf(!postgresTestsRun || !natsTestsRun);

type Fault = 'kill' | 'freeze' | 'broker' | 'database';
const FAULTS: readonly Fault[] = ['kill', 'freeze', 'broker', 'database'];
const SESSIONS_PER_ROUND = 3;
const FOLLOWERS_PER_SESSION = 2;
const NODE_TIMEOUT_MS = 1_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface StoredEvent {
  readonly id: string;
  readonly seq: number;
  readonly type: string;
  readonly turn_id: string | null;
}

inCluster('three nodes under faults, accounted for as Jepsen does', () => {
  it('loses, repeats and invents no event for any client; seq whole, every turn ended once, no node exits but the one killed', async () => {
    const seed = Number(process.env.METIS_FAULT_SEED ?? Date.now() % 1_000_000);
    const rounds = Number(process.env.METIS_FAULT_ROUNDS ?? FAULTS.length);
    console.log(`fault-accounting seed ${seed} (METIS_FAULT_SEED=${seed} replays it)`);
    const random = seeded(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const order = [...FAULTS].sort(() => random() - 0.5);
    const nats = await startNats();
    const nodes: ClusterTestNode[] = [];
    try {
      const store = freshDatabase(pg);
      for (const id of ['node-a', 'node-b', 'node-c'])
        nodes.push(await startClusterNode(store, nats.url, id, { nodeTimeoutMs: NODE_TIMEOUT_MS }));
      const unavailable = new Set<string>();
      const alive = () => nodes.filter((node) => !unavailable.has(node.nodeId));

      for (let round = 0; round < rounds; round += 1) {
        const fault = round < order.length ? order[round]! : pick(FAULTS);
        const faultAfterMs = Math.floor(random() * 2_000);
        const downMs = 1_000 + Math.floor(random() * 3_000);
        const victim = pick(nodes);
        const what = `round ${round}: ${fault}${fault === 'kill' || fault === 'freeze' ? ` ${victim.nodeId}` : ''} after ${faultAfterMs} ms (seed ${seed})`;

        const sessions: string[] = [];
        const followers = new Map<string, FollowingClient[]>();
        const turns: { sessionId: string; turnId: string }[] = [];
        for (let s = 0; s < SESSIONS_PER_ROUND; s += 1) {
          const created = await clusterRequest(pick(nodes).url, 'POST', '/sessions', {});
          expect(created.status, what).toBe(201);
          const sessionId = created.body.session_id as string;
          sessions.push(sessionId);
          const clients: FollowingClient[] = [];
          for (let f = 0; f < FOLLOWERS_PER_SESSION; f += 1) {
            const client = new FollowingClient(sessionId, alive);
            await client.attach(pick(nodes), null);
            clients.push(client);
          }
          followers.set(sessionId, clients);
        }
        for (const sessionId of sessions) {
          const turn = await clusterRequest(pick(nodes).url, 'POST', `/sessions/${sessionId}/turns`, {
            message: 'slow: a long answer',
          });
          expect(turn.status, `${what}: ${JSON.stringify(turn.body)}`).toBe(202);
          turns.push({ sessionId, turnId: turn.body.turn_id as string });
        }

        await sleep(faultAfterMs);
        if (fault === 'kill') {
          unavailable.add(victim.nodeId);
          victim.process.kill('SIGKILL');
          await victim.exited();
        } else if (fault === 'freeze') {
          unavailable.add(victim.nodeId);
          victim.process.kill('SIGSTOP');
          // Past the node timeout: the others see it dead and take over what it ran.
          await sleep(NODE_TIMEOUT_MS * 3);
          victim.process.kill('SIGCONT');
          unavailable.delete(victim.nodeId);
        } else if (fault === 'broker') {
          await nats.stop();
          await sleep(downMs);
          await nats.start();
        } else {
          await pg.stop('immediate');
          await sleep(downMs);
          await pg.start();
        }

        for (const { sessionId, turnId } of turns)
          for (const client of followers.get(sessionId)!)
            await client.waitFor(turnEnd(turnId), `the end of ${turnId} (${what})`, 90_000);
        if (fault === 'kill') {
          nodes[nodes.indexOf(victim)] = await startClusterNode(store, nats.url, victim.nodeId, {
            home: victim.home,
            nodeTimeoutMs: NODE_TIMEOUT_MS,
          });
          unavailable.delete(victim.nodeId);
        }
        // One more turn per session, on any node: the session goes on after the fault.
        for (const sessionId of sessions) {
          const next = await turnWhenServed(pick(alive()), sessionId, what);
          for (const client of followers.get(sessionId)!)
            await client.waitFor(turnEnd(next), `the end of the next turn (${what})`, 60_000);
        }
        for (const clients of followers.values()) for (const client of clients) client.close();

        for (const sessionId of sessions) {
          const stored = await exportSession(store, alive()[0]!.home, sessionId);
          for (const client of followers.get(sessionId)!) {
            const accounting = accountFor(client, stored);
            expect({ ...accounting, outOfOrder: client.outOfOrder }, `${what}, ${sessionId}`).toEqual({
              lost: [],
              duplicated: [],
              unexpected: [],
              outOfOrder: [],
            });
          }
          expect(
            stored.map((event) => event.seq),
            `${what}: seq of ${sessionId}`,
          ).toEqual(stored.map((_, index) => index + 1));
          const ends = new Map<string, number>();
          for (const event of stored)
            if (event.type === 'turn.started') ends.set(event.turn_id!, ends.get(event.turn_id!) ?? 0);
          for (const event of stored)
            if (
              (event.type === 'turn.completed' || event.type === 'turn.cancelled') &&
              event.turn_id !== null
            )
              ends.set(event.turn_id, (ends.get(event.turn_id) ?? 0) + 1);
          expect(
            [...ends].filter(([, count]) => count !== 1),
            `${what}: turns of ${sessionId} not ended exactly once`,
          ).toEqual([]);
        }
        const exited = nodes.filter(
          (node) => node.process.exitCode !== null || node.process.signalCode !== null,
        );
        expect(
          exited.map((node) => node.nodeId),
          `${what}: nodes that exited`,
        ).toEqual([]);
        const received = [...followers.values()]
          .flat()
          .reduce((sum, client) => sum + client.events.length, 0);
        const reconnects = [...followers.values()].flat().reduce((sum, client) => sum + client.reconnects, 0);
        console.log(
          `${what}: clean; ${received} events received by ${followers.size * FOLLOWERS_PER_SESSION} clients, ${reconnects} reconnect(s)`,
        );
      }
    } catch (error) {
      // What the nodes logged is what explains a failed round.
      for (const node of nodes)
        console.log(`--- ${node.nodeId} stderr (tail)\n${node.stderr().slice(-6_000)}`);
      throw error;
    } finally {
      for (const node of nodes) {
        if (node.process.exitCode === null && node.process.signalCode === null) {
          node.process.kill('SIGCONT');
          await node.stop('SIGTERM').catch(() => {});
        }
      }
      await nats.destroy();
    }
  }, 600_000);
});

/** Starts a turn on `node`, waiting out the moments a node refuses while the store or broker comes back. */
async function turnWhenServed(node: ClusterTestNode, sessionId: string, what: string): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const turn = await clusterRequest(node.url, 'POST', `/sessions/${sessionId}/turns`, {
      message: 'still there?',
    });
    if (turn.status === 202) return turn.body.turn_id as string;
    if (Date.now() > deadline || (turn.status !== 503 && turn.status !== 409))
      throw new Error(
        `${what}: the next turn of ${sessionId} on ${node.nodeId}: ${turn.status} ${JSON.stringify(turn.body)}`,
      );
    await sleep(250);
  }
}

async function exportSession(store: string, home: string, sessionId: string): Promise<StoredEvent[]> {
  const exported = await runCli(['export', '--store', store, '--session', sessionId], home);
  expect(exported.exitCode, exported.stderr).toBe(0);
  return exported.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as StoredEvent);
}
