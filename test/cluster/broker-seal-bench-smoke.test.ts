import { describe, expect, it } from 'vitest';
import { benchBrokerSeal } from '../../bench/broker-seal.js';
import { expectWellFormedFigures } from '../helpers/figures.js';
import { natsTestsRun } from '../helpers/nats.js';

// Smoke test only: the broker-seal suite runs end to end (a real nats-server) and returns well-formed
// figures, each beside its unsealed baseline. Timing is judged by `npm run bench`, never here.
describe.skipIf(!natsTestsRun)('bench broker-seal smoke', () => {
  it('benchBrokerSeal returns finite positive figures, each with its baseline', async () => {
    const figures = await benchBrokerSeal({ quick: true });
    expect(figures.map((f) => f.name)).toEqual([
      expect.stringMatching(/^seal \+ open, one delta \(\d+ B\)$/),
      'seal + open, one 4 KiB event',
      'through nats-server, 2,000 deltas back to back, sealed',
      'through nats-server, 500 4 KiB events back to back, sealed',
      'through nats-server, one delta at a time, sealed: latency p50',
      'through nats-server, one delta at a time, sealed: latency p99',
    ]);
    expectWellFormedFigures(figures);
  }, 120_000);
});
