/**
 * The broker-seal suite (issue 34, observation 3): what sealing every cluster message (AES-256-GCM,
 * src/core/cluster/message-seal.ts) costs on the fan-out path, each figure beside the same path
 * unsealed, in the same run. A real nats-server on this machine (skipped, saying why, without one).
 *
 * - CPU: seal (on the owner) + open (on a follower) of one event, beside encoding and decoding the same
 *   text as UTF-8 (what the unsealed path does): a `text.delta` envelope (~330 B) and a 4 KiB one.
 * - Back to back: 20,000 deltas published by one connection and received by another, µs per event.
 * - One at a time: a delta published, the next once the previous arrived; latency p50 and p99.
 *
 * Both modes use the same connections' code (broker.ts); the unsealed one hands the text over as UTF-8
 * bytes, as nodes did before sealing.
 */

import { performance } from 'node:perf_hooks';
import { type BrokerConnection, type BrokerMessage, connectBroker } from '../src/core/cluster/broker.js';
import { clusterKeys } from '../src/core/cluster/cluster-keys.js';
import { associatedData, messageSealer } from '../src/core/cluster/message-seal.js';
import { sealBroker } from '../src/core/cluster/sealed-broker.js';
import { silentLogger } from '../src/core/logger.js';
import { NATS_BIN, startNats } from '../test/helpers/nats.js';
import {
  collectGarbage,
  type Figure,
  figure,
  measureLatencies,
  percentile,
  type SuiteOptions,
  yieldToEventLoop,
} from './lib/stats.js';

const SESSION_ID = 'sess_01JBENCH000000000000000000';
const SUBJECT = `metis.session.${SESSION_ID}`;
const META = { 'Metis-Family': 'stream', 'Metis-Node': 'node-a' };
const KEY = clusterKeys('broker-seal-bench-token-0123456789').sealing;

/** A `text.delta` envelope as a node publishes it (eventJson), with a few words of text. */
function deltaJson(i: number): string {
  return JSON.stringify({
    id: `evt_01JBENCH${String(i).padStart(18, '0')}`,
    timestamp: '2026-11-28T03:02:42.452592Z',
    session_id: SESSION_ID,
    turn_id: 'turn_01JBENCH000000000000000000',
    parent_event_id: 'evt_01JBENCH000000000000000001',
    type: 'text.delta',
    actor: 'agent',
    payload: { message_id: 'msg_01JBENCH000000000000000000', content_block_index: 0, text: `word ${i} ` },
    sensitivity: 'private',
    seq: null,
  });
}

/** A stored event with a tool's output of some 4 KiB. */
const LARGE = JSON.stringify({
  id: 'evt_01JBENCH000000000000000002',
  timestamp: '2026-11-28T03:02:42.452592Z',
  session_id: SESSION_ID,
  turn_id: 'turn_01JBENCH000000000000000000',
  parent_event_id: 'evt_01JBENCH000000000000000001',
  type: 'tool.completed',
  actor: 'tool',
  payload: { tool_use_id: 'toolu_bench', output: 'x'.repeat(4_000), duration_ms: 12 },
  sensitivity: 'private',
  seq: 42,
});

/** The path between two connections, as its publisher sees it. */
interface Side {
  publish(text: string): void;
  close(): Promise<void>;
}

type Mode = 'plain' | 'sealed';

async function connection(url: string, name: string): Promise<BrokerConnection> {
  return connectBroker({ url, nodeId: name, setting: 'bench', logger: silentLogger() });
}

/** A publisher and a subscriber on two connections, in `mode`. */
async function path(url: string, mode: Mode, onText: (text: string) => void): Promise<Side> {
  const out = await connection(url, `bench-${mode}-out`);
  const inbound = await connection(url, `bench-${mode}-in`);
  let publish: (text: string) => void;
  let stop: () => void;
  if (mode === 'sealed') {
    const sender = sealBroker(out, KEY, silentLogger());
    const receiver = sealBroker(inbound, KEY, silentLogger());
    stop = receiver.subscribe(SUBJECT, (message: BrokerMessage) => onText(message.data));
    publish = (text) => sender.publish(SUBJECT, text, META);
  } else {
    stop = inbound.subscribe(SUBJECT, (message) =>
      onText(Buffer.from(message.data.buffer, message.data.byteOffset, message.data.byteLength).toString()),
    );
    publish = (text) => out.publish(SUBJECT, Buffer.from(text), META);
  }
  // The subscription reaches the server before the first publish.
  await new Promise((resolve) => setTimeout(resolve, 100));
  return {
    publish,
    close: async () => {
      stop();
      await out.close();
      await inbound.close();
    },
  };
}

async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('messages lost on the bench path');
    await yieldToEventLoop();
  }
}

/** µs per event for `count` deltas published back to back and all received. */
async function backToBack(url: string, mode: Mode, texts: readonly string[], count: number): Promise<number> {
  let received = 0;
  const side = await path(url, mode, () => {
    received += 1;
  });
  const started = performance.now();
  for (let i = 0; i < count; i += 1) {
    side.publish(texts[i % texts.length]!);
    // The client buffers; letting it write now and then keeps the measure about the path, not memory.
    if (i % 1_000 === 999) await yieldToEventLoop();
  }
  await until(() => received === count);
  const perEventUs = ((performance.now() - started) * 1000) / count;
  await side.close();
  return perEventUs;
}

/** Latencies (µs) of `count` deltas, each published once the one before arrived. */
async function oneAtATime(
  url: string,
  mode: Mode,
  texts: readonly string[],
  count: number,
): Promise<number[]> {
  let arrived: (() => void) | null = null;
  const side = await path(url, mode, () => arrived?.());
  const latencies: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const landed = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const started = performance.now();
    side.publish(texts[i % texts.length]!);
    await landed;
    latencies.push((performance.now() - started) * 1000);
  }
  await side.close();
  return latencies;
}

const median = (values: readonly number[]) =>
  percentile(
    [...values].sort((x, y) => x - y),
    50,
  );

export async function benchBrokerSeal(opts: SuiteOptions): Promise<Figure[]> {
  const figures: Figure[] = [];
  const texts = Array.from({ length: 1_000 }, (_, i) => deltaJson(i));
  const cpuIterations = opts.quick ? 5_000 : 100_000;

  // CPU: seal on one side, open on the other (two sealers: the open derives no key after the first).
  const owner = messageSealer(KEY);
  const follower = messageSealer(KEY);
  const bound = associatedData('message', SUBJECT, META);
  for (const [label, sample] of [
    [`one delta (${Buffer.byteLength(texts[0]!)} B)`, texts[0]!],
    ['one 4 KiB event', LARGE],
  ] as const) {
    collectGarbage();
    const plain = await measureLatencies(
      () => Buffer.from(sample).toString(),
      cpuIterations,
      cpuIterations / 5,
    );
    collectGarbage();
    const sealed = await measureLatencies(
      () => follower.open(bound, owner.seal(bound, sample)),
      cpuIterations,
      cpuIterations / 5,
    );
    figures.push(
      figure({
        name: `seal + open, ${label}`,
        value: percentile(sealed, 50),
        unit: 'µs',
        baseline: { name: 'UTF-8 encode + decode only', value: percentile(plain, 50) },
      }),
    );
  }

  if (NATS_BIN === null) {
    console.log('  broker-seal: the figures through nats-server skipped (no nats-server; see test/helpers/)');
    return figures;
  }
  const nats = await startNats();
  try {
    const count = opts.quick ? 2_000 : 20_000;
    const rounds = opts.quick ? 1 : 5;
    const paced = opts.quick ? 200 : 3_000;
    // Warm both paths (JIT, the follower's key) before anything is timed.
    await backToBack(nats.url, 'plain', texts, 2_000);
    await backToBack(nats.url, 'sealed', texts, 2_000);
    const perEvent: Record<Mode, number[]> = { plain: [], sealed: [] };
    const large: Record<Mode, number[]> = { plain: [], sealed: [] };
    const latencies: Record<Mode, number[]> = { plain: [], sealed: [] };
    // Rounds alternate, so drift of the machine falls on both modes alike.
    for (let round = 0; round < rounds; round += 1)
      for (const mode of ['plain', 'sealed'] as const) {
        collectGarbage();
        perEvent[mode].push(await backToBack(nats.url, mode, texts, count));
        large[mode].push(await backToBack(nats.url, mode, [LARGE], count / 4));
        latencies[mode].push(...(await oneAtATime(nats.url, mode, texts, paced / rounds)));
      }
    const sorted = (mode: Mode) => [...latencies[mode]].sort((x, y) => x - y);
    figures.push(
      figure({
        name: `through nats-server, ${count.toLocaleString('en-US')} deltas back to back, sealed`,
        value: median(perEvent.sealed),
        unit: 'µs/event',
        baseline: { name: 'unsealed', value: median(perEvent.plain) },
      }),
      figure({
        name: `through nats-server, ${(count / 4).toLocaleString('en-US')} 4 KiB events back to back, sealed`,
        value: median(large.sealed),
        unit: 'µs/event',
        baseline: { name: 'unsealed', value: median(large.plain) },
      }),
      figure({
        name: 'through nats-server, one delta at a time, sealed: latency p50',
        value: percentile(sorted('sealed'), 50),
        unit: 'µs',
        baseline: { name: 'unsealed', value: percentile(sorted('plain'), 50) },
      }),
      figure({
        name: 'through nats-server, one delta at a time, sealed: latency p99',
        value: percentile(sorted('sealed'), 99),
        unit: 'µs',
        baseline: { name: 'unsealed', value: percentile(sorted('plain'), 99) },
      }),
    );
  } finally {
    await nats.destroy();
  }
  return figures;
}
