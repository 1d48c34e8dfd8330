import { describe, it } from 'vitest';
import { durableProject, notLinux, storeReader } from './durable-helpers.js';
import { killDuringTurns } from './restart-rounds.js';

/*
 * Issue 31 "done when", bounded: a real `metis serve` is killed (SIGKILL or SIGTERM, at a seeded random
 * moment) during turns with tools and thinking, and started again: every turn ends completed (one
 * restart each: no cap reached), no command with side effects ran twice, each session's seq is whole.
 * The seed is printed; METIS_PROPERTY_SEED replays one.
 */

const SEED = Number(process.env.METIS_PROPERTY_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Bounded for the suite's 20 minutes; METIS_PROPERTY_ROUNDS runs more. */
const ROUNDS = Number(process.env.METIS_PROPERTY_ROUNDS ?? 3);

describe.skipIf(notLinux('restart-property'))('durable turns under random restarts (property)', () => {
  it(`every turn completes, no side effect twice, seq whole (seed ${SEED})`, async () => {
    console.log(`restart-property seed: ${SEED} (replay with METIS_PROPERTY_SEED=${SEED})`);
    const { home, dbPath, args } = durableProject({}, { shutdown_timeout_ms: 1500 });
    await killDuringTurns({ home, args, openStore: () => storeReader(dbPath), seed: SEED, rounds: ROUNDS });
  }, 120_000);
});
