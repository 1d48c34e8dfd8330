import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/helpers/slow-first-sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // expect.poll's own default (1 s) is a timing assertion: a page or a server that takes longer under a
    // loaded CI (a dashboard's queue list after two sends) failed for it. A poll only waits until it holds.
    expect: { poll: { timeout: 10_000 } },
    pool: 'forks',
    // Each worker process runs file after file on one module graph instead of a fresh fork per file: no
    // test mocks modules or changes process.env, and every fixture (servers, stores, homes) is the
    // test's own. Measured on 2 cores: test/server 113 s → 65 s; the whole suite's import time
    // 266 s → 20 s, its duration 1,151 s → 895 s (docs/decisions.md "Test files share a worker").
    isolate: false,
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
