import { copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { authHeaders } from '../helpers/home-token.js';
import { eventually, subscribeOn } from '../helpers/protocol.js';
import { type CliChild, runCli, serveCli } from '../helpers/run-cli.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const FIXTURES = join(import.meta.dirname, '../fixtures/plugins');

/** plugin_timeouts far below the defaults (10 s, 10 s, 5 s), so each hang is met quickly. */
const SHORT_BOUNDS = { load_ms: 1500, start_ms: 1500, stop_ms: 1000 };

/** A project folder with the fixtures copied in and a `metis.config.json` holding `config`. */
function project(fixtures: readonly string[], config: Record<string, unknown>) {
  const home = tempDir();
  for (const name of fixtures) copyFileSync(join(FIXTURES, name), join(home, name));
  const configPath = join(home, 'metis.config.json');
  writeFileSync(configPath, JSON.stringify(config));
  return { home, configPath, dbPath: join(home, 'metis.db') };
}

/**
 * Sends `signal` by pid and waits for the exit. Not execa's kill(): it follows a SIGTERM with a SIGKILL
 * after 5 s, which would hide a shutdown that hangs and end one that is meant to wait.
 */
function signalAndWait(server: CliChild, signal: NodeJS.Signals, ms: number): Promise<number | undefined> {
  process.kill(server.pid, signal);
  return within(server.exited(), ms, `metis serve to exit after ${signal}`);
}

/** Rejects after `ms`, so a process that never exits fails the test instead of hanging it. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The database was closed properly: no lock file, and it opens and checks clean. */
function expectClosedCleanly(dbPath: string): void {
  expect(existsSync(`${dbPath}.lock`), 'lock file left behind').toBe(false);
  const db = new Database(dbPath, { fileMustExist: true });
  try {
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    expect((db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n).toBeGreaterThan(0);
  } finally {
    db.close();
  }
}

/** A WebSocket client attached to a fresh session, as `metis tail` would be. */
async function attachClient(url: string, home: string) {
  const created = await fetch(`${url}/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...authHeaders(home) },
    body: JSON.stringify({ workspace_path: home }),
  });
  const { session_id } = (await created.json()) as { session_id: string };
  const { ws_url } = (await (
    await fetch(`${url}/sessions/${session_id}`, { headers: authHeaders(home) })
  ).json()) as { ws_url: string };
  const client = await openClient(ws_url);
  await subscribeOn(client, { filter: 'preset:full', since: null, snapshot: true });
  return client;
}

describe('metis serve: start-up never hangs on a config file or a plugin (issue 12, observation 5)', () => {
  it('a config file whose top-level await never settles: a named error, not exit 13', async () => {
    const home = tempDir();
    const configPath = join(home, 'metis.config.mjs');
    writeFileSync(configPath, 'await new Promise(() => {});\nexport default {};\n');
    const result = await runCli(
      ['serve', '--port', '0', '--config', configPath, '--db', join(home, 'metis.db')],
      home,
      {
        METIS_CONFIG_TIMEOUT_MS: '1000',
      },
    );
    expect(result.exitCode, result.stderr).toBe(2);
    expect(result.stderr).toContain(`error: loading ${configPath} did not finish within 1000 ms`);
    expect(result.stderr).toContain('METIS_CONFIG_TIMEOUT_MS');
  }, 60_000);

  // Short bounds (the defaults are 10 s each) keep the file quick; what is checked does not depend on them.
  it.each([
    ['hangs-import.mjs', 'load_ms', 'importing .*hangs-import\\.mjs did not settle within 1500 ms'],
    ['hangs-start.mjs', 'start_ms', 'start\\(\\) did not settle within 1500 ms'],
  ])(
    'a plugin %s that never settles: start-up fails naming it and plugin_timeouts.%s',
    async (file, key, problem) => {
      const { home, configPath, dbPath } = project([file], {
        plugins: [`./${file}`],
        plugin_timeouts: SHORT_BOUNDS,
      });
      const result = await runCli(['serve', '--port', '0', '--config', configPath, '--db', dbPath], home);
      expect(result.exitCode, result.stderr).toBe(1);
      expect(result.stderr).toMatch(
        new RegExp(
          `error: plugin "\\./${file.replace('.', '\\.')}" \\(plugins\\[0\\] in ${configPath}\\): ${problem}`,
        ),
      );
      expect(result.stderr).toContain(`plugin_timeouts.${key}`);
      expect(existsSync(`${dbPath}.lock`), 'lock file left behind').toBe(false);
    },
    60_000,
  );
});

describe('metis serve: SIGTERM completes within its bound whatever a plugin does (issue 12, observation 5)', () => {
  it('a handler that never settles, a client connected: exit 0, database closed, plugin named', async () => {
    const { home, configPath, dbPath } = project(['hangs-handle.mjs'], {
      plugins: ['./hangs-handle.mjs'],
      plugin_timeouts: SHORT_BOUNDS,
      server: { shutdown_timeout_ms: 2000 },
    });
    const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
    const client = await attachClient(server.url, home);
    // 2 s is the bound set (server.shutdown_timeout_ms); the rest is slack for a loaded machine.
    const exitCode = await signalAndWait(server, 'SIGTERM', 20_000);
    expect(exitCode, server.stderr()).toBe(0);
    await within(client.closed, 5000, 'the client to be closed');
    expectClosedCleanly(dbPath);
    expect(server.stderr()).toContain('hangs-handle');
    expect(server.stderr()).toContain(
      'queued events not all delivered at shutdown (still busy: hangs-handle)',
    );
  }, 60_000);

  it('a stop() that never settles: exit 0 after stop_ms, database closed, lock released, plugin named', async () => {
    const { home, configPath, dbPath } = project(['hangs-stop.mjs'], {
      plugins: ['./hangs-stop.mjs'],
      plugin_timeouts: SHORT_BOUNDS,
    });
    const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
    const exitCode = await signalAndWait(server, 'SIGTERM', 20_000);
    expect(exitCode, server.stderr()).toBe(0);
    expectClosedCleanly(dbPath);
    expect(server.stderr()).toContain(
      'plugin \\"hangs-stop\\" stop() did not settle within 1000 ms; abandoned',
    );
  }, 60_000);

  it('a second SIGTERM forces the exit at once, after closing the database and releasing the lock', async () => {
    const marker = join(tempDir(), 'stopping');
    const { home, configPath, dbPath } = project(['hangs-stop.mjs'], {
      plugins: [['./hangs-stop.mjs', { out: marker }]],
    });
    const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
    // The first SIGTERM reaches the stop() that hangs (5 s, stop_ms); the second one comes at once.
    process.kill(server.pid, 'SIGTERM');
    expect(
      await eventually(() => existsSync(marker), 20_000),
      `the shutdown to reach stop()\n${server.stderr()}`,
    ).toBe(true);
    const exitCode = await signalAndWait(server, 'SIGTERM', 10_000);
    expect(exitCode, server.stderr()).toBe(143);
    expect(server.stderr()).toContain('SIGTERM again: exiting now (database closed, lock released)');
    expectClosedCleanly(dbPath);
  }, 60_000);
});
