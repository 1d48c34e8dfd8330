/**
 * The streaming server benchmark (issue 5 item 6), every figure against a baseline measured in the same
 * run. Three kinds of process: the server under test (bench/lib/stream-server.ts: metis, a bare `ws`
 * server, or socket.io), the clients (bench/lib/stream-clients.ts), and this one, which only drives
 * them over IPC. Latencies compare the send time written into each delta's text with its receipt time,
 * both on the machine's monotonic clock.
 *
 *   1. latency, publish → client receipt of `text.delta`, p50 and p99 with 1, 10 and 100 clients at
 *      1,000 deltas/s, against a bare `ws` loop sending the same frames on the same schedule (target p99
 *      ≤ 2 ms at 100 clients); plus the rate each one actually kept at 100 clients: a loop that sends
 *      synchronously blocks its producer, so when it falls behind its deltas are stamped late and its
 *      latencies leave that wait out;
 *   2. delivered deltas/s to 100 clients at full speed (100 deltas per event-loop turn), against the
 *      bare `ws` loop (one `send` per client per frame), the same loop corked so each client's frames
 *      of a turn leave in one socket write (the fair, coalesced baseline), and socket.io's `io.emit`
 *      (targets: ≥ all three);
 *   3. replay of 10,000 stored events to a reconnecting client, subscribe → last event held, and the
 *      server CPU it takes, against a bare `ws` server sending the same frames from memory;
 *   4. memory per idle attached and subscribed connection with 5,000 connections, server RSS and heap
 *      + external after GC, against a bare `ws` server holding as many (target ≤ 16 KB);
 *   5. isolation: the p99 of 100 clients with one stalled client (socket paused, until the server drops
 *      it) present vs absent, as the median of interleaved rounds (target ≤ 1.1×), with an A/A control
 *      (a third session, nothing stalled) printed as the noise floor of that comparison.
 *
 * The machine is shared (2 cores, other test runs come and go), so the two sides of a comparison run in
 * short alternating rounds over connections that stay open, each server's path is run hot and its
 * start-up garbage collected before the first figure, and the per-round p99s are printed next to the
 * figures. `--quick` shortens every run and opens 500 idle connections instead of 5,000.
 *
 * Environment: STREAM_BENCH_VERBOSE=1 prints each phase's duration; STREAM_BENCH_CPU_PROF=<dir> writes a
 * --cpu-prof profile of each metis server process there.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { collectGarbage, type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';
import { startWorker, type Worker } from './lib/stream-ipc.js';
import type { WireTarget } from './lib/stream-wire.js';

const SERVER_SCRIPT = join(import.meta.dirname, 'lib', 'stream-server.ts');
const CLIENTS_SCRIPT = join(import.meta.dirname, 'lib', 'stream-clients.ts');

interface Config {
  /** Deltas to 10 clients that run each server's path hot before the first figure. */
  readonly primeDeltas: number;
  readonly clientCounts: readonly number[];
  readonly rate: number;
  /** Deltas each client group takes before its first measured round. */
  readonly warmupDeltas: number;
  readonly latencyRounds: number;
  readonly latencyRoundSeconds: number;
  readonly isolationRounds: number;
  readonly isolationRoundSeconds: number;
  readonly burstClients: number;
  readonly burstDeltas: number;
  readonly burstChunk: number;
  readonly burstRounds: number;
  readonly replayEvents: number;
  readonly replayRounds: number;
  readonly idleConnections: number;
}

const FULL: Config = {
  primeDeltas: 10_000,
  clientCounts: [1, 10, 100],
  rate: 1_000,
  // Fresh connections (and the heap after them) take a few seconds to settle: longer rounds after a
  // short warmup showed the first rounds 2–5× worse, on both servers.
  warmupDeltas: 3_000,
  latencyRounds: 6,
  latencyRoundSeconds: 1.5,
  // A paused client is dropped (1008) once ~3.5 MB back up behind it: ~10 s at 1,000 deltas/s here,
  // so the rounds with it present add up to more than that.
  isolationRounds: 12,
  isolationRoundSeconds: 1.2,
  burstClients: 100,
  burstDeltas: 4_000,
  burstChunk: 100,
  burstRounds: 3,
  replayEvents: 10_000,
  replayRounds: 5,
  idleConnections: 5_000,
};

const QUICK: Config = {
  ...FULL,
  primeDeltas: 1_000,
  warmupDeltas: 200,
  latencyRounds: 2,
  latencyRoundSeconds: 0.4,
  isolationRounds: 2,
  isolationRoundSeconds: 0.3,
  burstDeltas: 1_000,
  burstRounds: 1,
  replayRounds: 1,
  idleConnections: 500,
};

type Kind = 'metis' | 'ws' | 'wsc' | 'sio';

interface ServerProc {
  readonly kind: Kind;
  readonly worker: Worker;
  readonly target: WireTarget;
}

interface Collected {
  readonly clients: number;
  readonly latencies: Float64Array;
  readonly lastAtNs: number;
  readonly got: number;
  readonly expected: number;
  readonly gaps: number;
  readonly incomplete: number;
  readonly closed: readonly number[];
  readonly verifier: { got: number; gaps: number } | null;
  readonly stalledClosed: readonly (number | null)[];
}

interface Emitted {
  readonly startNs: number;
  readonly endNs: number;
  readonly droppedAfterMs?: number | null;
}

const KIND_LABEL: Record<Kind, string> = {
  metis: 'metis',
  ws: 'bare ws',
  wsc: 'bare ws, corked per tick',
  sio: 'socket.io',
};

export async function benchStream(opts: SuiteOptions): Promise<Figure[]> {
  const config = opts.quick ? QUICK : FULL;
  const dir = mkdtempSync(join(tmpdir(), 'metis-bench-stream-'));
  const workers: Worker[] = [];
  const start = async (script: string, args: string[], label: string, fdLimit?: number) => {
    const profileDir = process.env.STREAM_BENCH_CPU_PROF;
    const nodeFlags =
      profileDir && label.startsWith('metis') ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
    const worker = await startWorker(script, args, { label, fdLimit, nodeFlags });
    workers.push(worker);
    return worker;
  };
  const startServerProc = async (kind: Kind, name: string, fdLimit?: number): Promise<ServerProc> => {
    const worker = await start(SERVER_SCRIPT, [kind, mkdtempSync(join(dir, `${name}-`))], name, fdLimit);
    return { kind, worker, target: await worker.call<WireTarget>('target') };
  };
  const stop = async (worker: Worker) => {
    await worker.stop();
    const at = workers.indexOf(worker);
    if (at >= 0) workers.splice(at, 1);
  };

  const verbose = process.env.STREAM_BENCH_VERBOSE !== undefined;
  let phaseStart = performance.now();
  const phase = (name: string) => {
    if (verbose) console.log(`  [${name}: ${((performance.now() - phaseStart) / 1000).toFixed(1)} s]`);
    phaseStart = performance.now();
  };

  try {
    const figures: Figure[] = [];
    // One client process for every phase, allowed enough descriptors for the memory figure.
    const [clients, metis, bare, corked, sio] = await Promise.all([
      start(CLIENTS_SCRIPT, [], 'clients', config.idleConnections + 1_024),
      startServerProc('metis', 'metis server'),
      startServerProc('ws', 'bare ws server'),
      startServerProc('wsc', 'bare ws server, corked'),
      startServerProc('sio', 'socket.io server'),
    ]);
    for (const server of [metis, bare]) await prime(config, clients, server);
    phase('start');

    figures.push(...(await latencyFigures(config, clients, metis, bare)));
    phase('latency');
    figures.push(await isolationFigure(config, clients, metis));
    phase('isolation');
    figures.push(...(await throughputFigures(config, clients, metis, bare, corked, sio)));
    await Promise.all([stop(sio.worker), stop(corked.worker)]);
    phase('throughput');
    figures.push(...(await replayFigures(config, clients, metis, bare)));
    await Promise.all([stop(metis.worker), stop(bare.worker)]);
    phase('replay');

    collectGarbage();
    figures.push(...(await memoryFigures(config, clients, startServerProc, stop)));
    phase('memory');
    return figures;
  } finally {
    await Promise.allSettled(workers.map((w) => w.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------
// Paced runs

/**
 * Runs a server's delivery path hot once (JIT) and then collects the garbage of its start-up (module
 * loading leaves tens of MB), so that no figure pays for either.
 */
async function prime(config: Config, clients: Worker, server: ServerProc): Promise<void> {
  const group = await clients.call<number>('connect', { target: server.target, count: 10 });
  try {
    for (const chunk of [1, 100]) {
      await clients.call('arm', { group, expected: config.primeDeltas, latency: false });
      await server.worker.call('emitBurst', { count: config.primeDeltas, chunk });
      checkRun(server, await clients.call<Collected>('collect', { group, timeoutMs: 30_000 }), 'priming run');
    }
  } finally {
    await clients.call('disconnect', { group });
  }
  await server.worker.call('memory');
}

/**
 * One round: `seconds` of deltas at the configured rate to a group of readers that is already
 * connected (and warmed up); returns their latencies (ms, ascending) and the server's report.
 */
async function pacedRound(
  config: Config,
  clients: Worker,
  server: ServerProc,
  group: number,
  seconds: number,
  sessionId?: string,
): Promise<{ latencies: Float64Array; emitted: Emitted }> {
  const count = Math.round(seconds * config.rate);
  await clients.call('arm', { group, expected: count, latency: true });
  const emitted = await server.worker.call<Emitted>('emitPaced', { rate: config.rate, count, sessionId });
  const run = await clients.call<Collected>('collect', { group, timeoutMs: 15_000 });
  checkRun(server, run, `paced round to ${run.clients} clients`);
  return { latencies: run.latencies.sort(), emitted };
}

/** Untimed deltas to a fresh group: connections, JIT and buffers settle before anything is measured. */
async function warmUp(
  config: Config,
  clients: Worker,
  server: ServerProc,
  group: number,
  sessionId?: string,
): Promise<void> {
  await clients.call('arm', { group, expected: config.warmupDeltas, latency: false });
  await server.worker.call('emitPaced', { rate: config.rate, count: config.warmupDeltas, sessionId });
  checkRun(server, await clients.call<Collected>('collect', { group, timeoutMs: 15_000 }), 'warmup');
}

/** A run whose clients missed a delta, got one twice or out of order would flatter: refuse it. */
function checkRun(server: ServerProc, run: Collected, what: string): void {
  const problems: string[] = [];
  if (run.incomplete > 0) problems.push(`${run.incomplete} of ${run.clients} clients incomplete`);
  if (run.got !== run.expected) problems.push(`${run.got} of ${run.expected} deltas delivered`);
  if (run.gaps > 0) problems.push(`${run.gaps} out-of-order deltas`);
  if (run.closed.length > 0) problems.push(`clients closed by the server: ${run.closed.join(', ')}`);
  if (run.verifier !== null && run.verifier.gaps > 0) problems.push('the verifier saw out-of-order deltas');
  if (problems.length > 0) throw new Error(`${KIND_LABEL[server.kind]}, ${what}: ${problems.join('; ')}`);
}

/** The p99 of each round (each sorted), for the report: `1.23 0.98 ...`. */
function roundP99s(rounds: readonly Float64Array[]): string {
  return rounds.map((round) => percentile(round, 99).toFixed(2)).join(' ');
}

function concatSorted(parts: readonly Float64Array[]): Float64Array {
  const out = new Float64Array(parts.reduce((sum, p) => sum + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out.sort();
}

// ---------------------------------------------------------------------------------------------------
// 1. Latency at 1,000 deltas/s

/**
 * Both servers' clients stay connected while short rounds alternate between them (ABBA...), so both
 * see the same machine: on a shared 2-core box, other processes come and go within seconds.
 */
async function latencyFigures(
  config: Config,
  clients: Worker,
  metis: ServerProc,
  bare: ServerProc,
): Promise<Figure[]> {
  const figures: Figure[] = [];
  for (const n of config.clientCounts) {
    const groups = new Map<ServerProc, number>();
    const latencies = new Map<ServerProc, Float64Array[]>([
      [bare, []],
      [metis, []],
    ]);
    // Whether each server kept the schedule: deltas emitted over the time it took to emit them.
    const emitted = new Map<ServerProc, { deltas: number; seconds: number }>([
      [bare, { deltas: 0, seconds: 0 }],
      [metis, { deltas: 0, seconds: 0 }],
    ]);
    try {
      for (const server of [bare, metis]) {
        groups.set(server, await clients.call<number>('connect', { target: server.target, count: n }));
        await warmUp(config, clients, server, groups.get(server)!);
      }
      for (let round = 0; round < config.latencyRounds; round += 1) {
        for (const server of round % 2 === 0 ? [bare, metis] : [metis, bare]) {
          const run = await pacedRound(
            config,
            clients,
            server,
            groups.get(server)!,
            config.latencyRoundSeconds,
          );
          latencies.get(server)!.push(run.latencies);
          const total = emitted.get(server)!;
          total.deltas += run.latencies.length / n;
          total.seconds += (run.emitted.endNs - run.emitted.startNs) / 1e9;
        }
      }
    } finally {
      for (const group of groups.values()) await clients.call('disconnect', { group });
    }
    const bareAll = concatSorted(latencies.get(bare)!);
    const metisAll = concatSorted(latencies.get(metis)!);
    const label = `${n} client${n === 1 ? '' : 's'}`;
    const rate = (server: ServerProc) => emitted.get(server)!.deltas / emitted.get(server)!.seconds;
    console.log(
      `  latency, ${label}: p99 of each round (ms), metis ${roundP99s(latencies.get(metis)!)}; bare ws ${roundP99s(latencies.get(bare)!)}`,
    );
    // A loop that sends synchronously blocks its producer: when it cannot keep the schedule, its deltas
    // are emitted (and stamped) late and its latencies leave out that wait. Say so next to them.
    console.log(
      `  latency, ${label}: deltas/s actually emitted on the ${config.rate}/s schedule, metis ${rate(metis).toFixed(0)}; bare ws ${rate(bare).toFixed(0)}`,
    );
    for (const p of [50, 99]) {
      figures.push(
        figure({
          name: `stream latency p${p}, ${label} @ ${config.rate}/s`,
          value: percentile(metisAll, p),
          unit: 'ms',
          baseline: { name: `bare ws loop p${p}`, value: percentile(bareAll, p) },
          ...(p === 99 && n === 100 ? { target: { op: '<=' as const, value: 2 } } : {}),
        }),
      );
    }
    if (n === Math.max(...config.clientCounts)) {
      figures.push(
        figure({
          name: `stream deltas/s kept on a ${config.rate}/s schedule, ${label}`,
          value: rate(metis),
          unit: 'deltas/s',
          baseline: { name: 'bare ws loop', value: rate(bare) },
        }),
      );
    }
  }
  return figures;
}

// ---------------------------------------------------------------------------------------------------
// 5. Isolation from a stalled client

/**
 * Three sessions on the metis server, 100 readers each; one session also has a reader that stops
 * reading once subscribed. Rounds rotate over the sessions (only one gets deltas at a time), so the
 * "present" and "absent" figures come from interleaved seconds of the same server and machine. The
 * stalled client is dropped (1008) when its queue overflows, inside the rounds.
 */
async function isolationFigure(config: Config, clients: Worker, metis: ServerProc): Promise<Figure> {
  const n = 100;
  const sessionOf = (target: WireTarget) => (target as { sessionId: string }).sessionId;
  const absentTarget = await metis.worker.call<WireTarget>('newSession');
  const controlTarget = await metis.worker.call<WireTarget>('newSession');
  const side = (target: WireTarget) => ({
    target,
    session: sessionOf(target),
    group: 0,
    latencies: [] as Float64Array[],
  });
  const present = side(metis.target);
  const absent = side(absentTarget);
  // A second session with no stalled client: absent vs control measures how far two identical sides
  // drift apart on this machine, the noise floor a ±10% comparison has to clear.
  const control = side(controlTarget);
  let presentSeconds = 0;
  let droppedAt: number | null = null;
  try {
    present.group = await clients.call<number>('connect', { target: present.target, count: n + 1 });
    await clients.call('stall', { group: present.group, count: 1 });
    for (const s of [absent, control])
      s.group = await clients.call<number>('connect', { target: s.target, count: n });
    for (const s of [present, absent, control]) await warmUp(config, clients, metis, s.group, s.session);
    for (let round = 0; round < config.isolationRounds; round += 1) {
      for (const s of round % 2 === 0 ? [absent, present, control] : [control, present, absent]) {
        const run = await pacedRound(
          config,
          clients,
          metis,
          s.group,
          config.isolationRoundSeconds,
          s.session,
        );
        s.latencies.push(run.latencies);
        if (s === present) {
          if (droppedAt === null && run.emitted.droppedAfterMs != null) {
            droppedAt = presentSeconds + run.emitted.droppedAfterMs / 1000;
          }
          presentSeconds += config.isolationRoundSeconds;
        }
      }
    }
  } finally {
    for (const s of [present, absent, control])
      if (s.group !== 0) await clients.call('disconnect', { group: s.group });
  }
  console.log(
    `  isolation: the stalled client was ${
      droppedAt === null
        ? `still attached after ${presentSeconds.toFixed(1)} s of deltas`
        : `dropped by the server ${droppedAt.toFixed(1)} s into ${presentSeconds.toFixed(1)} s of deltas`
    }`,
  );
  // The figure is the median of the rounds' p99s: one round hit by another process's burst must not
  // decide a ±10% comparison. The pooled p99s are printed next to it.
  console.log(
    `  isolation: p99 of each round (ms), stalled client present ${roundP99s(present.latencies)}; ` +
      `absent ${roundP99s(absent.latencies)}; control ${roundP99s(control.latencies)}`,
  );
  const medianP99 = (s: { latencies: Float64Array[] }) => median(s.latencies.map((r) => percentile(r, 99)));
  const pooledP99 = (s: { latencies: Float64Array[] }) => percentile(concatSorted(s.latencies), 99);
  console.log(
    `  isolation: pooled p99 (ms) present ${pooledP99(present).toFixed(3)}, absent ${pooledP99(absent).toFixed(3)}, ` +
      `control ${pooledP99(control).toFixed(3)}; noise floor, control / absent (medians): ` +
      `${(medianP99(control) / medianP99(absent)).toFixed(2)}×`,
  );
  const baseline = medianP99(absent);
  return figure({
    name: `stream latency p99 (median of ${config.isolationRounds} rounds), ${n} clients + 1 stalled`,
    value: medianP99(present),
    unit: 'ms',
    baseline: { name: `${n} clients, none stalled`, value: baseline },
    target: { op: '<=', value: baseline * 1.1 },
  });
}

// ---------------------------------------------------------------------------------------------------
// 2. Throughput at full speed

async function throughputFigures(
  config: Config,
  clients: Worker,
  metis: ServerProc,
  bare: ServerProc,
  corked: ServerProc,
  sio: ServerProc,
): Promise<Figure[]> {
  const servers = [bare, corked, sio, metis];
  // First a check with a real client library next to the readers: same counts, same order.
  for (const server of servers) {
    const group = await clients.call<number>('connect', {
      target: server.target,
      count: config.burstClients,
      withVerifier: true,
    });
    try {
      await clients.call('arm', { group, expected: 500, latency: false });
      await server.worker.call('emitBurst', { count: 500, chunk: config.burstChunk });
      const run = await clients.call<Collected>('collect', { group, timeoutMs: 30_000 });
      checkRun(server, run, 'verification run');
      if (run.verifier?.got !== 500)
        throw new Error(`${KIND_LABEL[server.kind]}: the verifier missed deltas`);
    } finally {
      await clients.call('disconnect', { group });
    }
  }
  const groups = new Map<ServerProc, number>();
  const rates: Record<Kind, number[]> = { metis: [], ws: [], wsc: [], sio: [] };
  try {
    for (const server of servers) {
      groups.set(
        server,
        await clients.call<number>('connect', { target: server.target, count: config.burstClients }),
      );
    }
    for (let round = 0; round < config.burstRounds; round += 1) {
      const order = round % 2 === 0 ? servers : [...servers].reverse();
      for (const server of order)
        rates[server.kind].push(await burstRun(config, clients, server, groups.get(server)!));
    }
  } finally {
    for (const group of groups.values()) await clients.call('disconnect', { group });
  }
  const metisRate = median(rates.metis);
  return [
    figure({
      name: `stream delivered deltas/s, ${config.burstClients} clients`,
      value: metisRate,
      unit: 'events/s',
      baseline: { name: 'bare ws send loop', value: median(rates.ws) },
      target: { op: '>=', value: median(rates.ws) },
    }),
    // The fair baseline: the same loop, each client's frames of a tick in one socket write, as metis
    // writes them.
    figure({
      name: `stream delivered deltas/s, ${config.burstClients} clients`,
      value: metisRate,
      unit: 'events/s',
      baseline: { name: 'bare ws, corked per tick', value: median(rates.wsc) },
      target: { op: '>=', value: median(rates.wsc) },
    }),
    figure({
      name: `stream delivered deltas/s, ${config.burstClients} clients`,
      value: metisRate,
      unit: 'events/s',
      baseline: { name: 'socket.io io.emit', value: median(rates.sio) },
      target: { op: '>=', value: median(rates.sio) },
    }),
  ];
}

/** Deliveries per second: every client's deltas, from the first publish to the last receipt. */
async function burstRun(config: Config, clients: Worker, server: ServerProc, group: number): Promise<number> {
  await clients.call('arm', { group, expected: config.burstDeltas, latency: false });
  const emitted = await server.worker.call<Emitted>('emitBurst', {
    count: config.burstDeltas,
    chunk: config.burstChunk,
  });
  const run = await clients.call<Collected>('collect', { group, timeoutMs: 60_000 });
  checkRun(server, run, 'throughput run');
  return run.got / ((run.lastAtNs - emitted.startNs) / 1e9);
}

function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

// ---------------------------------------------------------------------------------------------------
// 3. Replay to a reconnecting client

async function replayFigures(
  config: Config,
  clients: Worker,
  metis: ServerProc,
  bare: ServerProc,
): Promise<Figure[]> {
  const results: Record<'metis' | 'ws', { ms: number[]; cpuMs: number[] }> = {
    metis: { ms: [], cpuMs: [] },
    ws: { ms: [], cpuMs: [] },
  };
  const prepared = {
    metis: await metis.worker.call<{ sessionId: string; since: string }>(
      'prepareReplay',
      { count: config.replayEvents },
      120_000,
    ),
    ws: await bare.worker.call<{ url: string }>('prepareReplay', { count: config.replayEvents }),
  };
  const targets: Record<'metis' | 'ws', { target: WireTarget; since: string | null }> = {
    metis: {
      target: {
        kind: 'metis',
        baseUrl: (metis.target as { baseUrl: string }).baseUrl,
        sessionId: prepared.metis.sessionId,
      },
      since: prepared.metis.since,
    },
    ws: { target: { kind: 'ws', url: prepared.ws.url }, since: null },
  };
  // One untimed round each warms up the statements and the JIT.
  for (let round = -1; round < config.replayRounds; round += 1) {
    for (const server of [bare, metis]) {
      const kind = server.kind as 'metis' | 'ws';
      const cpu0 = await server.worker.call<NodeJS.CpuUsage>('cpu');
      const run = await clients.call<{ ms: number; got: number; ackCount: number }>('replay', {
        ...targets[kind],
        expected: config.replayEvents,
      });
      const cpu1 = await server.worker.call<NodeJS.CpuUsage>('cpu');
      if (kind === 'metis' && run.ackCount !== config.replayEvents) {
        throw new Error(
          `metis replay: subscribe_ack announced ${run.ackCount} events, not ${config.replayEvents}`,
        );
      }
      if (round < 0) continue;
      results[kind].ms.push(run.ms);
      results[kind].cpuMs.push((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / 1000);
    }
  }
  const events = config.replayEvents.toLocaleString('en-US');
  return [
    figure({
      name: `replay ${events} events, subscribe → client holds all`,
      value: median(results.metis.ms),
      unit: 'ms',
      baseline: { name: 'bare ws sends the frames', value: median(results.ws.ms) },
    }),
    figure({
      name: `replay ${events} events, server CPU`,
      value: median(results.metis.cpuMs),
      unit: 'ms',
      baseline: { name: 'bare ws sends the frames', value: median(results.ws.cpuMs) },
    }),
  ];
}

// ---------------------------------------------------------------------------------------------------
// 4. Memory per idle connection

/** Connections open before the memory baseline is read (see memoryFigures). */
const WARM_CONNECTIONS = 50;

interface MemoryUsage {
  readonly rss: number;
  readonly heapUsed: number;
  readonly external: number;
  readonly arrayBuffers: number;
}

async function memoryFigures(
  config: Config,
  clients: Worker,
  startServerProc: (kind: Kind, name: string, fdLimit?: number) => Promise<ServerProc>,
  stop: (worker: Worker) => Promise<void>,
): Promise<Figure[]> {
  const n = config.idleConnections;
  const fdLimit = n + WARM_CONNECTIONS + 1_024;
  const perConnection: Record<'metis' | 'ws', { rss: number; heap: number }> = {
    metis: { rss: 0, heap: 0 },
    ws: { rss: 0, heap: 0 },
  };
  // Fresh server processes, so nothing of the earlier phases is in their heaps.
  const servers = await Promise.all([
    startServerProc('ws', 'bare ws server (memory)', fdLimit),
    startServerProc('metis', 'metis server (memory)', fdLimit),
  ]);
  try {
    for (const server of servers) {
      const kind = server.kind as 'metis' | 'ws';
      // Some connections first, kept open through the measurement: what is built lazily (JIT code,
      // pools, prepared statements) is then in the baseline, and closing nothing in between means no
      // freed pages can leave the RSS between the two readings. The figure is the marginal cost of n more.
      await clients.call('idleOpen', { target: server.target, count: WARM_CONNECTIONS });
      await sleep(300);
      const before = await server.worker.call<MemoryUsage>('memory');
      const opened = await clients.call<{ open: number }>(
        'idleOpen',
        { target: server.target, count: n },
        300_000,
      );
      await sleep(500);
      const after = await server.worker.call<MemoryUsage>('memory');
      const attached = await server.worker.call<number>('connections');
      await clients.call('idleClose');
      if (opened.open !== n + WARM_CONNECTIONS || attached !== n + WARM_CONNECTIONS) {
        throw new Error(
          `${KIND_LABEL[kind]}: ${opened.open} clients open, ${attached} attached, expected ${n + WARM_CONNECTIONS}`,
        );
      }
      perConnection[kind] = {
        rss: (after.rss - before.rss) / n / 1024,
        heap: (after.heapUsed + after.external - before.heapUsed - before.external) / n / 1024,
      };
      await stop(server.worker);
    }
  } finally {
    await Promise.all(servers.map((s) => stop(s.worker)));
  }
  const label = `${n.toLocaleString('en-US')} idle subscribed connections`;
  return [
    figure({
      name: `memory per connection (RSS), ${label}`,
      value: perConnection.metis.rss,
      unit: 'KB',
      baseline: { name: 'bare ws connection', value: perConnection.ws.rss },
      target: { op: '<=', value: 16 },
    }),
    figure({
      name: `memory per connection (heap + external), ${label}`,
      value: perConnection.metis.heap,
      unit: 'KB',
      baseline: { name: 'bare ws connection', value: perConnection.ws.heap },
      target: { op: '<=', value: 16 },
    }),
  ];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
