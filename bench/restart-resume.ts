/**
 * The durable-turns suite (issue 31, part 1): `metis serve` (a child run from source, the embedded
 * SQLite store) is SIGKILLed while a `slow:` turn streams, and started again on the same data. Two
 * times, from the spawn of the second process, in each round: until `/healthz` answers (the restart's
 * own time, the baseline), and until the first delta of the resumed turn is emitted (its `timestamp`,
 * read back from the stream archive). Target: the resumed delta at most 1 s after the restart's own
 * time. The median of the rounds is reported.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { openDatabase } from '../src/core/store/database.js';
import { cliNodeArgs } from '../test/helpers/cli-command.js';
import { type Figure, figure, percentile, type SuiteOptions } from './lib/stats.js';

const ROOT = join(import.meta.dirname, '..');
const TOKEN = 'restart-bench-token-0123456789abcdef';
const SLACK_MS = 1000;

interface Served {
  readonly child: ResultPromise;
  readonly url: string;
}

function serve(home: string): { child: ResultPromise; ready: Promise<Served> } {
  const child = execa(
    process.execPath,
    [...cliNodeArgs(), 'serve', '--port', '0', '--json', '--config', join(home, 'metis.config.json')],
    {
      cwd: ROOT,
      reject: false,
      stdin: 'ignore',
      env: { METIS_HOME: home, METIS_TOKEN: TOKEN, NO_COLOR: '1' },
    },
  );
  let out = '';
  child.stdout!.on('data', (chunk) => {
    out += String(chunk);
  });
  const ready = (async () => {
    const deadline = Date.now() + 60_000;
    while (!out.includes('\n')) {
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`metis serve did not start: ${out}${(await child).stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    return { child, url: (JSON.parse(out.split('\n')[0]!) as { url: string }).url };
  })();
  return { child, ready };
}

async function request(url: string, path: string, body: unknown): Promise<any> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

async function until<T>(probe: () => T | null | Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** One round: a turn cut by SIGKILL, the restart; both times in ms from the second spawn. */
async function round(): Promise<{ healthMs: number; deltaMs: number }> {
  const home = mkdtempSync(join(tmpdir(), 'metis-bench-restart-'));
  writeFileSync(
    join(home, 'metis.config.json'),
    JSON.stringify({
      storage: { database: join(home, 'metis.db') },
      runtime: { scripted: { slow_tokens: 2000, slow_token_delay_ms: 5 } },
    }),
  );
  const db = () => openDatabase(join(home, 'metis.db'), { create: false });
  try {
    const first = await serve(home).ready;
    const session = await request(first.url, '/sessions', { workspace_path: home });
    const { turn_id: turnId } = await request(first.url, `/sessions/${session.session_id}/turns`, {
      message: 'slow: a long story',
    });
    const callsOf = (handle: ReturnType<typeof db>) =>
      handle
        .prepare("SELECT id FROM events WHERE turn_id = ? AND type = 'llm.call_started' ORDER BY id")
        .pluck()
        .all(turnId) as string[];
    await until(() => {
      const handle = db();
      try {
        return callsOf(handle).length > 0 ? true : null;
      } finally {
        handle.close();
      }
    });
    // Mid-stream: some deltas out.
    await new Promise((resolve) => setTimeout(resolve, 200));
    first.child.kill('SIGKILL');
    await first.child;

    const spawnedUs = Date.now() * 1000;
    const second = serve(home);
    const { url } = await second.ready;
    await until(async () => ((await fetch(`${url}/healthz`).catch(() => null))?.ok ? true : null));
    const healthMs = (Date.now() * 1000 - spawnedUs) / 1000;
    const deltaUs = await until(() => {
      const handle = db();
      try {
        const resumed = callsOf(handle)[1];
        if (resumed === undefined) return null;
        const first = handle
          .prepare(
            `SELECT timestamp_us FROM stream_events WHERE session_id = ? AND id > ?
             AND event_json LIKE '%"type":"text.delta"%' ORDER BY id LIMIT 1`,
          )
          .pluck()
          .get(session.session_id, resumed) as number | undefined;
        return first ?? null;
      } finally {
        handle.close();
      }
    });
    second.child.kill('SIGKILL');
    await second.child;
    return { healthMs, deltaMs: (deltaUs - spawnedUs) / 1000 };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

export async function benchRestartResume(opts: SuiteOptions): Promise<Figure[]> {
  const rounds = opts.quick ? 2 : 5;
  const health: number[] = [];
  const delta: number[] = [];
  for (let i = 0; i < rounds; i += 1) {
    const { healthMs, deltaMs } = await round();
    health.push(healthMs);
    delta.push(deltaMs);
  }
  const median = (values: number[]) =>
    percentile(
      [...values].sort((a, b) => a - b),
      50,
    );
  const restart = median(health);
  console.log(
    `  restart-resume: ${rounds} rounds; /healthz ${health.map((v) => v.toFixed(0)).join(', ')} ms; ` +
      `first resumed delta ${delta.map((v) => v.toFixed(0)).join(', ')} ms`,
  );
  return [
    figure({
      name: `restart: spawn to the first delta of the resumed turn (median of ${rounds})`,
      value: median(delta),
      unit: 'ms',
      baseline: { name: 'spawn to /healthz answering (the restart itself)', value: restart },
      target: { op: '<=', value: restart + SLACK_MS },
    }),
  ];
}
