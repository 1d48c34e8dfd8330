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
      'failover: node killed mid-turn → its turn closed, seen on another node',
      'failover: node killed mid-turn → the session served by another node',
      'turn request p99 while pruning 5,000 events on PostgreSQL (3 nodes serving)',
      'turn requests failed while pruning',
    ]);
    // No request fails, before the prune or during it: both counts are 0.
    expectWellFormedFigures(figures, (name) => name === 'turn requests failed while pruning');
    expect(figures.at(-1)!.value).toBe(0);
  }, 180_000);
});
