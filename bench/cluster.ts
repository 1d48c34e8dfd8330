/**
 * The cluster suite (issue 20): three `metis serve --nats` nodes on one PostgreSQL store and one
 * nats-server, all real and on this machine (skipped, saying why, without the server binaries).
 *
 * - delta latency: a `slow:` turn (300 deltas, 10 ms apart) runs on node A; one client follows it on A
 *   and one on C. Each delta's latency is its arrival minus its `timestamp`, both clocks being this
 *   machine's (performance.timeOrigin-anchored microseconds). p50 and p99 on C (cross-node: A's NATS
 *   publish, C's mirror) beside the same on A (one node), in the same turns.
 * - fan-out: 300 clients, 100 on each node, follow one turn on A; p99 delta latency over every client
 *   and delta, beside 300 clients all on A.
 * - failover: the node running a turn is killed (SIGKILL); the time until a client on another node sees
 *   the cut model call closed (the turn then resumes there), and until a request for the session is served by a live node, beside the node
 *   timeout (the bound the store's leases give).
 * - retention online: `metis trace prune --store` of 1,000,000 old events (loaded before the nodes
 *   start) while the three nodes serve turns (lib/cluster-prune.ts).
 * - start-up: a node's start until `/healthz` on that store of 1,000,000 events, beside a store of
 *   100,000 (lib/cluster-startup.ts).
 * - under load: 30 sessions owned by different nodes, 120 clients over three nodes of their own, all
 *   turns at once; delta p99 on other nodes beside the owners' (lib/cluster-load.ts), and the nodes'
 *   CPU per turn beside the same on one node (lib/cluster-cpu.ts).
 */

import { isoToMicros, nowMicros } from '../src/core/events/clock.js';
import { NATS_BIN, startNats } from '../test/helpers/nats.js';
import { freshDatabase, PG_BIN, startPostgres } from '../test/helpers/postgres.js';
import { benchClusterCpu } from './lib/cluster-cpu.js';
import { benchCrossNodeLoad } from './lib/cluster-load.js';
import {
  type BenchNode,
  followSession,
  nodeRequest,
  slowTokensFor,
  startBenchNode,
} from './lib/cluster-nodes.js';
import { benchPruneWhileServing, loadOldEvents } from './lib/cluster-prune.js';
import { benchNodeStart } from './lib/cluster-startup.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

const TIMING = { heartbeatMs: 200, nodeTimeoutMs: 1_000 };

/** A client following a session on one node: each delta's latency, and the events seen. */
interface Follower {
  readonly latenciesUs: number[];
  readonly seen: Set<string>;
  close(): void;
}

async function follow(node: BenchNode, sessionId: string): Promise<Follower> {
  const latenciesUs: number[] = [];
  const seen = new Set<string>();
  const close = await followSession(node, sessionId, (event) => {
    seen.add(`${event.type}:${event.turn_id}`);
    if (event.type === 'text.delta') latenciesUs.push(nowMicros() - isoToMicros(event.timestamp));
  });
  return { latenciesUs, seen, close };
}

async function until(check: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Runs a `slow:` turn on the session (sent to `via`) and waits until every follower saw it end. */
async function slowTurn(via: BenchNode, sessionId: string, followers: readonly Follower[]): Promise<void> {
  const turn = await nodeRequest(via.url, 'POST', `/sessions/${sessionId}/turns`, { message: 'slow: bench' });
  const ended = `turn.completed:${turn.turn_id}`;
  await until(() => followers.every((follower) => follower.seen.has(ended)), 'the end of the turn');
}

const ms = (us: number) => us / 1000;
const sortedLatencies = (followers: readonly Follower[]) =>
  followers.flatMap((follower) => follower.latenciesUs).sort((x, y) => x - y);

export async function benchCluster(opts: SuiteOptions): Promise<Figure[]> {
  if (PG_BIN === null || NATS_BIN === null) {
    console.log(
      `  cluster skipped: ${PG_BIN === null ? 'no PostgreSQL server binaries' : 'no nats-server'} (see test/helpers/)`,
    );
    return [];
  }
  const postgres = await startPostgres();
  const nats = await startNats();
  const nodes: BenchNode[] = [];
  try {
    const store = freshDatabase(postgres);
    // Old events for the retention and start-up figures, there before the nodes start.
    const old = opts.quick ? 5_000 : 1_000_000;
    const loadBegan = performance.now();
    await loadOldEvents(store, old);
    console.log(
      `  (stored ${old.toLocaleString()} old events in ${((performance.now() - loadBegan) / 1000).toFixed(1)} s)`,
    );
    const starting = await benchNodeStart(postgres, nats.url, store, old, TIMING, opts.quick ? 1 : 3);
    for (const id of ['node-a', 'node-b', 'node-c'])
      nodes.push(await startBenchNode(store, nats.url, id, TIMING, slowTokensFor(opts.quick)));
    const [a, b, c] = nodes as [BenchNode, BenchNode, BenchNode];

    // Delta latency: one client on the node running the turn, one on another node.
    const session = (await nodeRequest(a.url, 'POST', '/sessions', {})).session_id as string;
    const onA = await follow(a, session);
    const onC = await follow(c, session);
    for (let turn = 0; turn < (opts.quick ? 1 : 4); turn += 1) await slowTurn(a, session, [onA, onC]);
    onA.close();
    onC.close();
    const local = sortedLatencies([onA]);
    const cross = sortedLatencies([onC]);
    console.log(`  delta latency: ${local.length} deltas on A, ${cross.length} on C`);

    // Fan-out: 300 clients over three nodes, then 300 on one.
    const clients = opts.quick ? 60 : 300;
    const fanOut = async (placement: (index: number) => BenchNode) => {
      const id = (await nodeRequest(a.url, 'POST', '/sessions', {})).session_id as string;
      const followers = await Promise.all(
        Array.from({ length: clients }, (_, i) => follow(placement(i), id)),
      );
      await slowTurn(a, id, followers);
      for (const follower of followers) follower.close();
      return sortedLatencies(followers);
    };
    const spread = await fanOut((i) => nodes[i % 3]!);
    const single = await fanOut(() => a);

    const underLoad = await benchCrossNodeLoad(postgres, nats.url, opts.quick);
    const cpu = await benchClusterCpu(postgres, nats.url, opts.quick);

    const pruning = await benchPruneWhileServing(opts, store, nodes);

    // Failover: the node running a turn dies; a client on C waits, then a request goes to B.
    const orphan = (await nodeRequest(a.url, 'POST', '/sessions', {})).session_id as string;
    const watcher = await follow(c, orphan);
    const cut = await nodeRequest(b.url, 'POST', `/sessions/${orphan}/turns`, { message: 'slow: cut' });
    await until(() => watcher.latenciesUs.length > 20, 'the turn under way');
    const killedAt = performance.now();
    await a.kill();
    nodes.splice(nodes.indexOf(a), 1);
    // The node taking the session over closes the cut model call and resumes the turn (durable turns,
    // docs/runtime.md); with runtime.on_restart: fail it ends the turn instead.
    await until(
      () =>
        watcher.seen.has(`llm.call_failed:${cut.turn_id}`) ||
        watcher.seen.has(`turn.completed:${cut.turn_id}`) ||
        watcher.seen.has(`turn.cancelled:${cut.turn_id}`),
      'the cut call closed',
    );
    const closedMs = performance.now() - killedAt;
    let servedMs = Number.NaN;
    for (;;) {
      try {
        // Queued behind the resumed turn (durable turns) when it still runs: served all the same.
        await nodeRequest(b.url, 'POST', `/sessions/${orphan}/turns`, {
          message: 'again',
          multitask: 'enqueue',
        });
        servedMs = performance.now() - killedAt;
        break;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    watcher.close();

    const node = { name: 'the same turn followed on the node running it', value: 0 };
    return [
      figure({
        name: 'cross-node delta latency p50 (client on C, turn on A)',
        value: ms(percentile(cross, 50)),
        unit: 'ms',
        baseline: { ...node, value: ms(percentile(local, 50)) },
      }),
      figure({
        name: 'cross-node delta latency p99 (client on C, turn on A)',
        value: ms(percentile(cross, 99)),
        unit: 'ms',
        baseline: { ...node, value: ms(percentile(local, 99)) },
      }),
      figure({
        name: `fan-out: ${clients} clients over three nodes, delta latency p50`,
        value: ms(percentile(spread, 50)),
        unit: 'ms',
        baseline: { name: `${clients} clients on one node`, value: ms(percentile(single, 50)) },
      }),
      figure({
        name: `fan-out: ${clients} clients over three nodes, delta latency p99`,
        value: ms(percentile(spread, 99)),
        unit: 'ms',
        baseline: { name: `${clients} clients on one node`, value: ms(percentile(single, 99)) },
      }),
      figure({
        name: 'failover: node killed mid-turn → its cut call closed and the turn resumed, seen on another node',
        value: closedMs,
        unit: 'ms',
        baseline: { name: 'cluster.node_timeout_ms', value: TIMING.nodeTimeoutMs },
      }),
      figure({
        name: 'failover: node killed mid-turn → the session served by another node',
        value: servedMs,
        unit: 'ms',
        baseline: { name: 'cluster.node_timeout_ms', value: TIMING.nodeTimeoutMs },
      }),
      ...underLoad,
      ...cpu,
      ...pruning,
      ...starting,
    ];
  } finally {
    for (const node of nodes) await node.stop().catch(() => {});
    await nats.destroy();
    await postgres.destroy();
  }
}
