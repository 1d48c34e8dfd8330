import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { differences } from '../../src/client/conformance/client-traces.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';
import { TRACES_DIR } from '../helpers/traces.js';

const MINIMAL_CLIENT = join(import.meta.dirname, 'minimal-client.mjs');
const TRACES = TRACES_DIR;

interface Report {
  client: string;
  passed: number;
  failed: number;
  results: { name: string; passed: boolean; error: string | null; differences: { path: string }[] }[];
}

async function conformanceClient(args: string[], env: Record<string, string> = {}) {
  const envPrefix = Object.entries(env).map(([k, v]) => `${k}=${v} `);
  const run = await runCli(
    [
      'conformance',
      'client',
      '--json',
      ...args.map((a) => (a === '$CLIENT' ? `${envPrefix.join('')}node ${MINIMAL_CLIENT}` : a)),
    ],
    tempDir(),
  );
  return { ...run, report: run.stdout ? (JSON.parse(run.stdout) as Report) : null };
}

const failedNames = (report: Report | null) => report?.results.filter((r) => !r.passed).map((r) => r.name);

describe('metis conformance client', () => {
  it('the built-in reducer passes every recorded trace', async () => {
    const { exitCode, report } = await conformanceClient([]);
    expect(exitCode).toBe(0);
    expect(report!.failed).toBe(0);
    expect(report!.passed).toBeGreaterThanOrEqual(13);
    expect(report!.results.map((r) => r.name)).toEqual(
      expect.arrayContaining(['plain-turn', 'duplicate-event', 'unknown-event-type', 'worker-session']),
    );
  });

  it('a minimal external client, written from the traces README alone, passes with --cmd', async () => {
    const { exitCode, report, stderr } = await conformanceClient(['--cmd', '$CLIENT']);
    expect(stderr).toBe('');
    expect(exitCode).toBe(0);
    expect(report!.client).toContain('minimal-client.mjs');
    expect(failedNames(report)).toEqual([]);
    expect(report!.passed).toBeGreaterThanOrEqual(13);
  }, 60_000);

  it.each([
    ['no-dedupe', 'duplicate-event', '$.mismatches'],
    ['trust-deltas', 'final-content-mismatch', '$.messages[0].blocks[0].text'],
    ['fail-on-unknown', 'unknown-event-type', null],
  ])(
    'a client with the %s bug fails exactly the %s trace',
    async (bug, trace, path) => {
      const { exitCode, report } = await conformanceClient(['--cmd', '$CLIENT'], { MINIMAL_CLIENT_BUG: bug });
      expect(exitCode).toBe(1);
      expect(failedNames(report)).toEqual([trace]);
      const failure = report!.results.find((r) => r.name === trace)!;
      if (path === null)
        expect(failure.error).toMatch(/exited with code 1: [\s\S]*unknown event type hologram/);
      else expect(failure.differences.map((d) => d.path)).toContain(path);
    },
    60_000,
  );

  it('prints PASS/FAIL lines and the closing count without --json', async () => {
    const run = await runCli(['conformance', 'client', '--only', 'plain-turn', 'thinking'], tempDir());
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(/^PASS {2}plain-turn/m);
    expect(run.stdout).toMatch(/^PASS {2}thinking/m);
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('2 passed, 0 failed');
  });

  it('reads traces from --traces, and a client that prints no JSON fails with the reason', async () => {
    const dir = tempDir();
    for (const file of ['plain-turn.jsonl', 'plain-turn.expected.json'])
      copyFileSync(join(TRACES, file), join(dir, file));
    const { exitCode, report } = await conformanceClient(['--traces', dir, '--cmd', 'echo not json']);
    expect(exitCode).toBe(1);
    expect(report!.results).toHaveLength(1);
    expect(report!.results[0]!.error).toMatch(/printed no JSON on stdout: "not json/);
  });

  it('names the bad flag: a missing folder, an empty folder, an unknown trace, a bad timeout', async () => {
    const empty = tempDir();
    writeFileSync(join(empty, 'notes.txt'), 'no traces here');
    const cases: [string[], RegExp][] = [
      [['--traces', join(empty, 'nope')], /--traces: no such folder/],
      [['--traces', empty], /--traces: .* holds no trace/],
      [['--only', 'no-such-trace'], /--only: no trace named no-such-trace; the traces are .*plain-turn/],
      [['--timeout', '0'], /--timeout: "0" is not a positive integer/],
    ];
    const runs = await Promise.all(
      cases.map(([args]) => runCli(['conformance', 'client', ...args], tempDir())),
    );
    runs.forEach((run, i) => {
      const [args, message] = cases[i]!;
      expect(run.exitCode, args.join(' ')).toBe(2);
      expect(run.stderr).toMatch(message);
    });
  });
});

describe('differences', () => {
  it('lists the paths where two JSON values differ, arrays by index and objects by key', () => {
    expect(differences({ a: [1, 2], b: 'x' }, { a: [1, 3], b: 'x' })).toEqual([
      { path: '$.a[1]', expected: 2, seen: 3 },
    ]);
    expect(differences([1], [1, 2])).toEqual([
      { path: '$.length', expected: 1, seen: 2 },
      { path: '$[1]', expected: undefined, seen: 2 },
    ]);
    expect(differences({ a: 1 }, null)).toEqual([{ path: '$', expected: { a: 1 }, seen: null }]);
    expect(differences({ a: { b: 1 } }, { a: { b: 1 } })).toEqual([]);
  });
});
