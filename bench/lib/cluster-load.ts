import { isoToMicros, nowMicros } from '../../src/core/events/clock.js';
import { freshDatabase, type PostgresServer } from '../../test/helpers/postgres.js';
import {
  type BenchNode,
  followSession,
  nodeRequest,
  slowTokensFor,
  startBenchNode,
} from './cluster-nodes.js';
import { type Figure, figure, percentile } from './stats.js';

/** The shape of the load: issue 35 names 30 sessions and 120 clients over three nodes. */
export interface LoadShape {
  readonly sessions: number;
  readonly clientsPerSession: number;
}

export const FULL_LOAD: LoadShape = { sessions: 30, clientsPerSession: 4 };
export const QUICK_LOAD: LoadShape = { sessions: 6, clientsPerSession: 4 };

/** How long the turns of one round may take before the round is given up (a turn is ~3 s alone). */
const ROUND_TIMEOUT_MS = 120_000;

interface LoadClient {
  /** Whether the client is attached to the node owning its session. */
  readonly onOwner: boolean;
  readonly nodeId: string;
  readonly latenciesUs: number[];
  readonly ended: Set<string>;
  close(): void;
}

async function attach(node: BenchNode, sessionId: string, onOwner: boolean): Promise<LoadClient> {
  const latenciesUs: number[] = [];
  const ended = new Set<string>();
  const close = await followSession(node, sessionId, ({ type, timestamp, turn_id: turnId }) => {
    if (type === 'text.delta') latenciesUs.push(nowMicros() - isoToMicros(timestamp));
    else if ((type === 'turn.completed' || type === 'turn.cancelled') && turnId !== null) ended.add(turnId);
  });
  return { onOwner, nodeId: node.nodeId, latenciesUs, ended, close };
}

/** What one round of the load saw: every delta latency (µs, ascending) on owners and on other nodes. */
export interface LoadRound {
  readonly turns: number;
  readonly ownerUs: number[];
  readonly crossUs: number[];
}

/**
 * Makes `shape.sessions` sessions, the i-th through node i mod n (its owner), attaches the clients of
 * session i to nodes i, i+1, … mod n, then starts one `slow:` turn per session at once, each sent to
 * its owner, and waits until every client saw its turn end. Clients are attached before the turns
 * start, so `prepared` (if given) runs with every client in place and only the turns left to run.
 */
export async function runClusterLoad(
  nodes: readonly BenchNode[],
  shape: LoadShape,
  prepared?: () => void,
): Promise<LoadRound> {
  const owners = Array.from({ length: shape.sessions }, (_, i) => nodes[i % nodes.length]!);
  const sessions = await Promise.all(
    owners.map(async (owner) => (await nodeRequest(owner.url, 'POST', '/sessions', {})).session_id as string),
  );
  const clients = await Promise.all(
    sessions.map((sessionId, i) =>
      Promise.all(
        Array.from({ length: shape.clientsPerSession }, (_, j) => {
          const node = nodes[(i + j) % nodes.length]!;
          return attach(node, sessionId, node === owners[i]);
        }),
      ),
    ),
  );
  try {
    prepared?.();
    const turns = await Promise.all(
      sessions.map(
        async (sessionId, i) =>
          (
            await nodeRequest(owners[i]!.url, 'POST', `/sessions/${sessionId}/turns`, {
              message: 'slow: load',
            })
          ).turn_id as string,
      ),
    );
    const deadline = Date.now() + ROUND_TIMEOUT_MS;
    while (!clients.every((group, i) => group.every((client) => client.ended.has(turns[i]!)))) {
      if (Date.now() > deadline) {
        const waiting = clients.flatMap((group, i) =>
          group
            .filter((client) => !client.ended.has(turns[i]!))
            .map((client) => `${sessions[i]} on ${client.nodeId}${client.onOwner ? ' (owner)' : ''}`),
        );
        throw new Error(
          `timed out waiting for the turns under load to end; still waiting: ${waiting.join(', ')}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  } finally {
    for (const client of clients.flat()) client.close();
  }
  const all = clients.flat();
  const sorted = (onOwner: boolean) =>
    all
      .filter((client) => client.onOwner === onOwner)
      .flatMap((client) => client.latenciesUs)
      .sort((x, y) => x - y);
  return { turns: sessions.length, ownerUs: sorted(true), crossUs: sorted(false) };
}

/**
 * The beats of the nodes under load: the defaults (cluster.heartbeat_ms, cluster.node_timeout_ms), not
 * the suite's fast ones. With a 1 s node timeout on two busy cores a node's own beat comes late, it no
 * longer trusts its leases and drops its sessions' deltas (a thawed owner's, event-sequencer.ts), and
 * the others take its sessions over: the figures would count what is left.
 */
export const DEPLOYED_TIMING = { heartbeatMs: 1_000, nodeTimeoutMs: 10_000 };

/** `count` nodes on a new database of `postgres`, named `<prefix>-<n>`, with the deployed beats. */
export async function startLoadNodes(
  postgres: PostgresServer,
  nats: string,
  prefix: string,
  count: number,
  quick: boolean,
): Promise<BenchNode[]> {
  const store = freshDatabase(postgres);
  const nodes: BenchNode[] = [];
  try {
    for (let n = 0; n < count; n += 1)
      nodes.push(
        await startBenchNode(store, nats, `${prefix}-${n + 1}`, DEPLOYED_TIMING, slowTokensFor(quick)),
      );
  } catch (error) {
    await stopNodes(nodes);
    throw error;
  }
  return nodes;
}

export async function stopNodes(nodes: readonly BenchNode[]): Promise<void> {
  for (const node of nodes) await node.stop().catch(() => {});
}

/**
 * The cross-node p99 under load beside the owner's, same turns, on three nodes of their own: target
 * ≤ 3× the owner's. A first round warms the nodes up; the second is measured.
 */
export async function benchCrossNodeLoad(
  postgres: PostgresServer,
  nats: string,
  quick: boolean,
): Promise<Figure[]> {
  const shape = quick ? QUICK_LOAD : FULL_LOAD;
  const nodes = await startLoadNodes(postgres, nats, 'load', 3, quick);
  let round: LoadRound;
  try {
    if (!quick) await runClusterLoad(nodes, shape); // warm-up
    round = await runClusterLoad(nodes, shape);
  } finally {
    await stopNodes(nodes);
  }
  const clients = shape.sessions * shape.clientsPerSession;
  console.log(
    `  under load: ${shape.sessions} turns at once, ${clients} clients; ${round.ownerUs.length} deltas seen on owners, ${round.crossUs.length} on other nodes`,
  );
  const ownerP99 = percentile(round.ownerUs, 99) / 1000;
  return [
    figure({
      name: `cross-node delta latency p99 under load (${shape.sessions} sessions, ${clients} clients over ${nodes.length} nodes)`,
      value: percentile(round.crossUs, 99) / 1000,
      unit: 'ms',
      baseline: { name: "the owner's clients, same turns", value: ownerP99 },
      target: { op: '<=', value: 3 * ownerP99 },
    }),
  ];
}
