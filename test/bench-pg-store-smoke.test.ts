import { describe, expect, it } from 'vitest';
import { benchPgStore } from '../bench/pg-store.js';
import { expectWellFormedFigures } from './helpers/figures.js';
import { postgresTestsRun } from './helpers/postgres.js';

// Smoke test only: the pg-store suite runs end to end (its own PostgreSQL server, real `metis serve`
// children) and returns well-formed figures. Timing is judged by `npm run bench`, never here.
describe.skipIf(!postgresTestsRun)('bench pg-store smoke', () => {
  it('benchPgStore returns the serve path, start-up and prune figures, finite, each with its baseline', async () => {
    const figures = await benchPgStore({ quick: true });
    const named = (prefix: string) => figures.find((f) => f.name.startsWith(prefix));
    expect(named('metis serve on PostgreSQL alone: bus → PgStoreWriter')).toBeDefined();
    expect(
      named('metis serve on PostgreSQL alone: start until /healthz, store of 50,000 events'),
    ).toBeDefined();
    // A comparison of two measured starts (|large / small - 1|), with no baseline of its own.
    const startRatio = named('metis serve start on 50,000 events against 5,000')!;
    expect(Number.isFinite(startRatio.value) && startRatio.value >= 0).toBe(true);
    // A server on PostgreSQL alone keeps nothing in its data folder: 0 bytes is the expected value.
    const folder = named('metis serve data folder after a start and stop')!;
    expect(folder.pass).toBe(true);
    // The prune ran beside a serving server and no turn request failed (0 is the expected count).
    expect(
      named('turn request p99 while pruning 50,000 events on PostgreSQL (one server serving)'),
    ).toBeDefined();
    expect(named('turn requests failed while pruning')!.value).toBe(0);
    expectWellFormedFigures(
      figures.filter((f) => f !== startRatio),
      (name) => name === folder.name || name === 'turn requests failed while pruning',
    );
  }, 180_000);
});
