import { EventEmitter } from 'node:events';
import { type EmitInput, EventBus } from '../src/core/bus/event-bus.js';
import { silentLogger } from '../src/core/logger.js';
import {
  collectGarbage,
  type Figure,
  figure,
  measureLatencies,
  percentile,
  type SuiteOptions,
  yieldToEventLoop,
} from './lib/stats.js';

/** Emits between two drains in the latency phase: far below the bus's queue bound of 10,000. */
const LATENCY_CHUNK = 1_000;
/** Emits between two flushes in the throughput phase. */
const THROUGHPUT_CHUNK = 5_000;

const SESSION_ID = 'sess_01JBENCH000000000000000000';
const TURN_ID = 'turn_01JBENCH000000000000000000';
const PARENT_ID = 'evt_01JBENCH000000000000000000';

/** A realistic `turn.completed` payload: every required field plus two populated additive ones. */
const PAYLOAD = {
  stop_reason: 'end_turn' as const,
  llm_call_count: 3,
  tool_call_count: 2,
  total_input_tokens: 18_432,
  total_output_tokens: 1_207,
  total_cost_usd: 0.0731,
  wall_time_seconds: 12.84,
  user_id: 'user_7f3a',
  team_id: 'team_platform',
};

const INPUT: EmitInput = {
  type: 'turn.completed',
  session_id: SESSION_ID,
  turn_id: TURN_ID,
  parent_event_id: PARENT_ID,
  payload: PAYLOAD,
};

/**
 * The bus against a bare EventEmitter, both with one no-op subscriber, in one process:
 *   1. synchronous cost of one emit (validation, stamping, enqueue), p50 and p99;
 *   2. dispatch throughput: emit + fan-out to a fast-path subscriber, in events/s (median of rounds).
 */
export async function benchBus(opts: SuiteOptions): Promise<Figure[]> {
  const warmup = opts.quick ? 5_000 : 20_000;
  const latencyIterations = opts.quick ? 20_000 : 200_000;
  const throughputEvents = opts.quick ? 20_000 : 200_000;
  const throughputRounds = opts.quick ? 1 : 3;

  let busDelivered = 0;
  const bus = new EventBus({ logger: silentLogger(), validation: 'strict' });
  // One fast-path subscriber, so emit really enqueues (with none it returns before the queue).
  bus.subscribe({
    name: 'bench-noop',
    fastPath: true,
    handler: () => {
      busDelivered += 1;
    },
  });
  await bus.flush();
  busDelivered = 0;

  let emitterDelivered = 0;
  const emitter = new EventEmitter();
  emitter.on('e', () => {
    emitterDelivered += 1;
  });

  const drain = async () => {
    await bus.flush();
    await yieldToEventLoop();
  };

  // Phase 0: warm both paths up (JIT, zod's compiled parser, the ULID factory, the seq map).
  await measureLatencies(() => bus.emit(INPUT), 0, warmup, { every: LATENCY_CHUNK, between: drain });
  await measureLatencies(() => emitter.emit('e', PAYLOAD), 0, warmup);

  // Phase 1: synchronous emit latency, one hrtime pair per call; drains happen outside the timed region.
  collectGarbage();
  const emitterLatency = await measureLatencies(() => emitter.emit('e', PAYLOAD), latencyIterations, 0);
  collectGarbage();
  const busLatency = await measureLatencies(() => bus.emit(INPUT), latencyIterations, 0, {
    every: LATENCY_CHUNK,
    between: drain,
  });
  expectDelivered('bus', busDelivered, warmup + latencyIterations);
  expectDelivered('EventEmitter', emitterDelivered, warmup + latencyIterations);

  // Phase 2: throughput, wall time of emit and dispatch together. This machine-level figure is noisy, so
  // a full run takes the median of a few rounds, alternating baseline and bus.
  const emitterRates: number[] = [];
  const busRates: number[] = [];
  for (let round = 0; round < throughputRounds; round += 1) {
    collectGarbage();
    emitterDelivered = 0;
    emitterRates.push(await throughput(throughputEvents, () => emitter.emit('e', PAYLOAD), undefined));
    expectDelivered('EventEmitter', emitterDelivered, throughputEvents);
    collectGarbage();
    busDelivered = 0;
    busRates.push(
      await throughput(
        throughputEvents,
        () => bus.emit(INPUT),
        () => bus.flush(),
      ),
    );
    expectDelivered('bus', busDelivered, throughputEvents);
  }
  collectGarbage();
  const emitterRate = median(emitterRates);
  const busRate = median(busRates);

  return [
    figure({
      name: 'bus.emit p50',
      value: percentile(busLatency, 50),
      unit: 'µs',
      baseline: { name: 'EventEmitter.emit p50', value: percentile(emitterLatency, 50) },
      target: { op: '<=', value: 5 },
    }),
    figure({
      name: 'bus.emit p99',
      value: percentile(busLatency, 99),
      unit: 'µs',
      baseline: { name: 'EventEmitter.emit p99', value: percentile(emitterLatency, 99) },
      target: { op: '<=', value: 20 },
    }),
    figure({
      name: 'bus.dispatch throughput',
      value: busRate,
      unit: 'events/s',
      baseline: { name: 'EventEmitter.emit', value: emitterRate },
      target: { op: '>=', value: 300_000 },
    }),
  ];
}

/** Emits `n` events in chunks, awaiting `flush` after each chunk; returns events per second of wall time. */
async function throughput(
  n: number,
  emitOne: () => unknown,
  flush: (() => Promise<void>) | undefined,
): Promise<number> {
  const start = process.hrtime.bigint();
  for (let done = 0; done < n; ) {
    const end = Math.min(done + THROUGHPUT_CHUNK, n);
    for (; done < end; done += 1) emitOne();
    if (flush !== undefined) await flush();
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return n / seconds;
}

function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

/** A benchmark that silently lost events would report a flattering number: refuse to. */
function expectDelivered(what: string, delivered: number, expected: number): void {
  if (delivered !== expected) {
    throw new Error(`${what}: subscriber saw ${delivered} events, expected ${expected}`);
  }
}
