import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/helpers/slow-first-sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Vitest's default is one worker per core but one: a single file at a time on CI's 2 cores. Most
    // files wait on servers, child processes and timers rather than compute, so two run side by side.
    maxWorkers: 2,
    // The slowest files start first, so the two workers finish together (test/helpers/slow-first-sequencer.ts).
    sequence: { sequencer: SlowFirstSequencer },
    // A test that forgets its own METIS_HOME must not write a token or a database into the real ~/.metis.
    globalSetup: ['test/helpers/isolated-home.ts', 'test/helpers/compiled-cli.ts'],
    // The JSON report lets .ci/run print "N passed, N failed" so a run that executed nothing is visible.
    reporters: ['default', 'json'],
    outputFile: { json: 'test-results/vitest.json' },
  },
});
