/**
 * The cluster suite's CPU figure (issue 35): the same turns, with their clients spread over the nodes
 * (cluster-load.ts), run on three nodes and on a one-node cluster, each on a database of its own on the
 * same PostgreSQL server and nats-server, with the deployed beats (cluster-load.ts). The CPU of a run
 * is the sum over the node processes of utime + stime from /proc/<pid>/stat, from when every client is
 * attached until each saw its turn end, divided by the number of turns. A cluster that shares the work
 * adds little: target ≤ 1.3× one node. PostgreSQL's and nats-server's CPU are not counted (the same
 * store and bus serve both).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { PostgresServer } from '../../test/helpers/postgres.js';
import {
  FULL_LOAD,
  type LoadShape,
  QUICK_LOAD,
  runClusterLoad,
  startLoadNodes,
  stopNodes,
} from './cluster-load.js';
import type { BenchNode } from './cluster-nodes.js';
import { type Figure, figure, percentile } from './stats.js';

/** Trailing work of the turns (the last shipments, the clients' goodbyes) is counted too. */
const SETTLE_MS = 300;

function clockTicksPerSecond(): number {
  try {
    const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(ticks) && ticks > 0 ? ticks : 100;
  } catch {
    return 100;
  }
}

/** utime + stime of a process (all its threads), in clock ticks. */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) is in parentheses and may hold spaces: count fields after it.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of the line (utime, stime) are the 12th and 13th after the name.
  return Number(fields[11]) + Number(fields[12]);
}

/** Runs the load once on `nodes`: their CPU, in milliseconds, per turn. */
async function cpuPerTurn(nodes: readonly BenchNode[], shape: LoadShape, msPerTick: number): Promise<number> {
  const sum = () => nodes.reduce((total, node) => total + cpuTicks(node.pid), 0);
  let before = 0;
  const round = await runClusterLoad(nodes, shape, () => {
    before = sum();
  });
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  return ((sum() - before) * msPerTick) / round.turns;
}

export async function benchClusterCpu(
  postgres: PostgresServer,
  nats: string,
  quick: boolean,
): Promise<Figure[]> {
  const shape = quick ? QUICK_LOAD : FULL_LOAD;
  const msPerTick = 1000 / clockTicksPerSecond();
  const three = await startLoadNodes(postgres, nats, 'cpu-three', 3, quick);
  const onThree: number[] = [];
  const onOne: number[] = [];
  try {
    const single = await startLoadNodes(postgres, nats, 'cpu-one', 1, quick);
    try {
      // A node's first turns count its warm-up (modules loaded, code compiled): not measured. (Not
      // in --quick, which checks that the figure is made, not what it is.)
      if (!quick) {
        await runClusterLoad(three, shape);
        await runClusterLoad(single, shape);
      }
      // Alternated, so that the machine's other load falls on both alike.
      for (let run = 0; run < (quick ? 1 : 3); run += 1) {
        onThree.push(await cpuPerTurn(three, shape, msPerTick));
        onOne.push(await cpuPerTurn(single, shape, msPerTick));
      }
    } finally {
      await stopNodes(single);
    }
  } finally {
    await stopNodes(three);
  }
  const format = (list: number[]) => list.map((ms) => ms.toFixed(1)).join(', ');
  console.log(
    `  CPU per turn (${shape.sessions} turns at once, ${shape.sessions * shape.clientsPerSession} clients): ${format(onThree)} ms on 3 nodes; ${format(onOne)} ms on one`,
  );
  const median = (list: number[]) =>
    percentile(
      [...list].sort((x, y) => x - y),
      50,
    );
  const baseline = median(onOne);
  return [
    figure({
      name: `cluster CPU per turn, sum over 3 nodes (${shape.sessions} turns at once, clients spread)`,
      value: median(onThree),
      unit: 'ms',
      baseline: { name: 'the same turns and clients on one node', value: baseline },
      target: { op: '<=', value: 1.3 * baseline },
    }),
  ];
}
