import { describe, expect, it } from 'vitest';
import { benchCluster } from '../bench/cluster.js';
import { expectWellFormedFigures } from './helpers/figures.js';
import { natsTestsRun } from './helpers/nats.js';
import { postgresTestsRun } from './helpers/postgres.js';

// Smoke test only: the cluster suite runs end to end (three real nodes, PostgreSQL, nats-server) and
// returns well-formed figures, each with its baseline. Timing is judged by `npm run bench`, never here.
describe.skipIf(!postgresTestsRun || !natsTestsRun)('bench cluster smoke', () => {
  it('benchCluster returns finite positive figures, each with its baseline', async () => {
    const figures = await benchCluster({ quick: true });
    expect(figures.map((f) => f.name)).toEqual([
      'cross-node delta latency p50 (client on C, turn on A)',
      'cross-node delta latency p99 (client on C, turn on A)',
      'fan-out: 60 clients over three nodes, delta latency p50',
      'fan-out: 60 clients over three nodes, delta latency p99',
      'failover: node killed mid-turn → its cut call closed and the turn resumed, seen on another node',
      'failover: node killed mid-turn → the session served by another node',
      'cross-node delta latency p99 under load (6 sessions, 24 clients over 3 nodes)',
      'cluster CPU per turn, sum over 3 nodes (6 turns at once, clients spread)',
      'turn request p99 while pruning 5,000 events on PostgreSQL (3 nodes serving)',
      'turn requests failed while pruning',
      'node start until /healthz, store of 5,000 events',
      "node start on 5,000 events against 500 (1.0 = independent of the store's size)",
    ]);
    // No request fails, before the prune or during it: both counts are 0.
    // The start-up ratio is itself a comparison of two measured starts (|large / small - 1|).
    const startRatio = figures.find((f) => f.name.startsWith('node start on 5,000 events against'))!;
    expect(Number.isFinite(startRatio.value) && startRatio.value >= 0).toBe(true);
    expectWellFormedFigures(
      figures.filter((f) => f !== startRatio),
      (name) => name === 'turn requests failed while pruning',
    );
    expect(figures.find((f) => f.name === 'turn requests failed while pruning')!.value).toBe(0);
  }, 180_000);
});
