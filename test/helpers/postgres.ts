import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { freePort } from './free-port.js';

/**
 * A real PostgreSQL server for the tests: Debian's server binaries (`/usr/lib/postgresql/<n>/bin`, or
 * `$METIS_PG_BIN`), a fresh cluster in a temp folder on a free port, trust auth on 127.0.0.1 only.
 * PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` account (or
 * `nobody`). `.ci/run` installs the package and sets METIS_REQUIRE_POSTGRES=1, which turns a missing
 * server into a failure instead of a skip.
 */
export const PG_BIN = process.env.METIS_PG_BIN ?? newestServerBin();
export const postgresTestsRun = PG_BIN !== null || process.env.METIS_REQUIRE_POSTGRES === '1';
if (PG_BIN === null)
  console.warn(
    'PostgreSQL tests skipped: no server binaries in /usr/lib/postgresql/<version>/bin ' +
      "(install Debian's postgresql, or set METIS_PG_BIN)",
  );

function newestServerBin(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((name) => existsSync(join(root, name, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length === 0 ? null : join(root, versions[0]!, 'bin');
}

/** The account the cluster runs as: the caller, or an unprivileged one when the caller is root. */
function serverAccount(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    try {
      const id = (flag: string) =>
        Number(execFileSync('id', [flag, name], { encoding: 'utf8', stdio: 'pipe' }));
      return { uid: id('-u'), gid: id('-g') };
    } catch {
      // no such account: try the next
    }
  }
  throw new Error('running as root, and neither a postgres nor a nobody account exists to run PostgreSQL');
}

/** The role whose password the cluster checks (create it with one: `CREATE ROLE ... PASSWORD '...'`). */
export const PASSWORD_ROLE = 'metis_password';

export interface PostgresServer {
  /** `postgres://metis@127.0.0.1:<port>/postgres`; `urlOf(db)` names another database. */
  readonly url: string;
  readonly port: number;
  urlOf(database: string): string;
  /** Runs SQL through psql as the superuser (creating databases, roles, breaking things on purpose). */
  psql(sql: string, database?: string): string;
  /**
   * Stops the server: `fast` disconnects clients and leaves the data consistent; `immediate` is a crash
   * (no checkpoint; the next start recovers from the WAL). `start` brings it back on the same port and data.
   */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its folder. */
  destroy(): Promise<void>;
}

const INITDB_ARGS = ['-U', 'metis', '--auth=trust', '-E', 'UTF8', '--no-sync', '--no-instructions'];

/**
 * A data folder `initdb` made once for these binaries and arguments (kept in the temp folder, shared by
 * every test process and run), which each server copies: initdb costs ~0.8 s of CPU per server, a copy
 * ~0.08 s, and 40-odd test files start one. Made aside and renamed into place, so a process never copies
 * half of one; one role signs in with a password (every other one is trusted on 127.0.0.1), for
 * wrong-password tests.
 */
function initializedCluster(bin: string, account: { uid: number; gid: number } | null): string {
  const key = createHash('sha256')
    .update(`${bin}\0${INITDB_ARGS.join(' ')}\0${PASSWORD_ROLE}\0${account?.uid ?? process.getuid?.()}`)
    .digest('hex')
    .slice(0, 16);
  const template = join(tmpdir(), `metis-pg-template-${key}`);
  if (existsSync(join(template, 'PG_VERSION'))) return template;
  const building = mkdtempSync(`${template}.`);
  if (account !== null) chownSync(building, account.uid, account.gid);
  const data = join(building, 'data');
  execFileSync(join(bin, 'initdb'), ['-D', data, ...INITDB_ARGS], {
    ...(account ?? {}),
    cwd: building,
    stdio: 'pipe',
  });
  const hba = join(data, 'pg_hba.conf');
  writeFileSync(hba, `host all ${PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n${readFileSync(hba, 'utf8')}`);
  try {
    renameSync(data, template);
  } catch {
    // another process made it first
  }
  rmSync(building, { recursive: true, force: true });
  return template;
}

/** Starts a fresh cluster; resolves once it accepts connections. */
export async function startPostgres(): Promise<PostgresServer> {
  if (PG_BIN === null) throw new Error('no PostgreSQL server binaries (see test/helpers/postgres.ts)');
  const bin = PG_BIN;
  const dir = mkdtempSync(join(tmpdir(), 'metis-pg-'));
  const data = join(dir, 'data');
  const account = serverAccount();
  if (account !== null) chownSync(dir, account.uid, account.gid);
  const as = account ?? {};
  // `cp -a` keeps the owner and the 0700 mode PostgreSQL insists on.
  execFileSync('cp', ['-a', initializedCluster(bin, account), data], { stdio: 'pipe' });
  const port = await freePort();
  let child: ChildProcess | null = null;
  const start = async () => {
    child = spawn(
      join(bin, 'postgres'),
      ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'],
      { ...as, cwd: dir, stdio: 'ignore' },
    );
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        execFileSync(join(bin, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'metis'], {
          stdio: 'ignore',
        });
        return;
      } catch {
        if (Date.now() > deadline) throw new Error(`PostgreSQL did not start on port ${port} within 30 s`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const stop = async (mode: 'fast' | 'immediate' = 'fast') => {
    const running = child;
    child = null;
    if (running === null || running.exitCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    await exited;
  };
  await start();
  const urlOf = (database: string) => `postgres://metis@127.0.0.1:${port}/${database}`;
  return {
    url: urlOf('postgres'),
    port,
    urlOf,
    psql: (sql, database = 'postgres') =>
      execFileSync(
        join(bin, 'psql'),
        [
          '-h',
          '127.0.0.1',
          '-p',
          String(port),
          '-U',
          'metis',
          '-d',
          database,
          '-v',
          'ON_ERROR_STOP=1',
          '-tAc',
          sql,
        ],
        { encoding: 'utf8' },
      ),
    stop,
    start,
    destroy: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let databases = 0;

/**
 * METIS_TEST_STORE_EVENTS=N runs the PostgreSQL tests on stores that are not new (issue 35: the cluster
 * tests "gain a run with 1,000,000 events in the store"): each file's server loads N old events once
 * into a template, and every fresh database is a copy of it. Unset or 0 (CI): empty databases.
 */
const PRELOADED_EVENTS = Number(process.env.METIS_TEST_STORE_EVENTS ?? 0);
const TEMPLATE = 'metis_test_preloaded';

/** A new database on `server` for one test, so tests share a cluster but not their data. */
export function freshDatabase(server: PostgresServer): string {
  databases += 1;
  const name = `metis_test_${process.pid}_${databases}`;
  server.psql(
    PRELOADED_EVENTS > 0 ? `CREATE DATABASE ${name} TEMPLATE ${TEMPLATE}` : `CREATE DATABASE ${name}`,
  );
  return server.urlOf(name);
}

async function preload(server: PostgresServer): Promise<void> {
  if (!(PRELOADED_EVENTS > 0)) return;
  const began = Date.now();
  server.psql(`CREATE DATABASE ${TEMPLATE}`);
  const { loadOldEvents } = await import('./pg-old-events.js');
  await loadOldEvents(server.urlOf(TEMPLATE), PRELOADED_EVENTS);
  console.log(
    `PostgreSQL tests on stores of ${PRELOADED_EVENTS.toLocaleString()} old events (METIS_TEST_STORE_EVENTS; loaded in ${Date.now() - began} ms)`,
  );
}

/**
 * One PostgreSQL server for the calling test file: started before its tests (when the binaries are
 * there), destroyed after them. The object returned stands for the server once it has started.
 */
export function postgresForFile(): PostgresServer {
  let started: PostgresServer | null = null;
  beforeAll(async () => {
    if (!postgresTestsRun) return;
    started = await startPostgres();
    await preload(started);
  }, 600_000);
  afterAll(async () => {
    await started?.destroy();
  });
  return new Proxy({} as PostgresServer, {
    get: (_, key) => {
      if (started === null) throw new Error('the PostgreSQL server of this file has not started');
      return started[key as keyof PostgresServer];
    },
  });
}
