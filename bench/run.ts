/**
 * The benchmark entry: `npm run bench [-- --only <suite>] [-- --quick]`.
 *
 * Runs every suite in SUITES in one process, prints each suite's figures, then a summary table of all
 * of them against their baselines and targets. Exits non-zero when a suite throws; a missed target is
 * reported (MISS) but does not fail the run, since wall-clock figures depend on the machine.
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { type Figure, formatFigure, formatSummary, type Suite } from './lib/stats.js';

/** Add a suite with one line; modules load lazily, so `--only` runs just the one asked for. */
const SUITES: readonly { readonly name: string; readonly load: () => Promise<Suite> }[] = [
  { name: 'bus', load: async () => (await import('./bus.js')).benchBus },
  { name: 'store', load: async () => (await import('./store.js')).benchStore },
  { name: 'stream', load: async () => (await import('./stream.js')).benchStream },
  { name: 'snapshot', load: async () => (await import('./snapshot.js')).benchSnapshot },
  { name: 'stream-archive', load: async () => (await import('./stream-archive.js')).benchStreamArchive },
  { name: 'sse', load: async () => (await import('./sse.js')).benchSse },
  { name: 'http', load: async () => (await import('./http.js')).benchHttp },
  { name: 'pg-store', load: async () => (await import('./pg-store.js')).benchPgStore },
  { name: 'cluster', load: async () => (await import('./cluster.js')).benchCluster },
  { name: 'broker-seal', load: async () => (await import('./broker-seal.js')).benchBrokerSeal },
  { name: 'gateway', load: async () => (await import('./gateway.js')).benchGateway },
  { name: 'session-list', load: async () => (await import('./session-list.js')).benchSessionList },
  { name: 'restart-resume', load: async () => (await import('./restart-resume.js')).benchRestartResume },
];

interface Args {
  readonly only: string | null;
  readonly quick: boolean;
}

function usage(): string {
  return `usage: npm run bench -- [--quick] [--only <${SUITES.map((s) => s.name).join('|')}>]`;
}

function parseArgs(argv: readonly string[]): Args {
  let only: string | null = null;
  let quick = false;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg === '--quick') quick = true;
    else if (arg === '--only') {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new Error('--only needs a suite name');
      only = next;
      i += 1;
    } else if (arg.startsWith('--only=')) only = arg.slice('--only='.length);
    else if (arg === '--help' || arg === '-h') {
      console.log(usage());
      process.exit(0);
    } else throw new Error(`unknown argument "${arg}"`);
  }
  if (only !== null && !SUITES.some((s) => s.name === only)) {
    throw new Error(`unknown suite "${only}"; suites: ${SUITES.map((s) => s.name).join(', ')}`);
  }
  return { only, quick };
}

async function main(): Promise<number> {
  let args: Args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (error) {
    console.error(`bench: ${(error as Error).message}\n${usage()}`);
    return 2;
  }

  const cpu = os.cpus()[0]?.model.trim() ?? 'unknown CPU';
  console.log('metis benchmarks');
  console.log(`  node     ${process.version} (${process.platform}/${process.arch})`);
  console.log(`  cpu      ${cpu} × ${os.cpus().length}`);
  console.log(`  date     ${new Date().toISOString()}`);
  console.log(`  mode     ${args.quick ? 'quick (smoke run, figures not meaningful)' : 'full'}`);
  if (typeof (globalThis as { gc?: unknown }).gc !== 'function') {
    console.log('  note     global.gc unavailable (run with --expose-gc); no GC between phases');
  }

  const all: Figure[] = [];
  const failed: string[] = [];
  for (const suite of SUITES) {
    if (args.only !== null && suite.name !== args.only) continue;
    console.log(`\n== ${suite.name} ==`);
    const started = performance.now();
    try {
      const run = await suite.load();
      const figures = await run({ quick: args.quick });
      for (const f of figures) console.log(`  ${formatFigure(f)}`);
      console.log(`  (${((performance.now() - started) / 1000).toFixed(1)} s)`);
      all.push(...figures);
    } catch (error) {
      failed.push(suite.name);
      console.error(`  suite "${suite.name}" failed:`, error);
    }
  }

  console.log('\n== summary ==');
  console.log(all.length > 0 ? formatSummary(all) : '(no figures)');
  const missed = all.filter((f) => f.pass === false).length;
  console.log(
    `\n${all.length} figures, ${missed} missed their target` +
      (failed.length > 0 ? `; FAILED suites: ${failed.join(', ')}` : ''),
  );
  return failed.length > 0 ? 1 : 0;
}

process.exitCode = await main();
