import { createHash } from 'node:crypto';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runConformance } from '../../src/client/conformance/runner.js';
import type { RunningService } from '../../src/core/app/start-service.js';
import { openDatabase } from '../../src/core/store/database.js';
import type { PgShipper } from '../../src/core/store/postgres/pg-shipper.js';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, PASSWORD_ROLE, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 19's done-when and point 4: `metis serve --store postgres://…` with `store.working_copy: true`
 * runs on a working copy shipped to PostgreSQL (src/core/store/postgres/working-copy.ts); it passes the conformance suite, keeps going
 * through a database restart without losing anything, and refuses a store it cannot use at start-up.
 */

const pg = postgresForFile();

/**
 * A data folder whose config keeps the working copy (`store.working_copy: true`): one server on
 * PostgreSQL runs without it by default (test/store/serve-postgres-alone covers that), and these cases
 * are about the copy.
 */
function workingCopyHome(): { home: string; config: string[] } {
  const home = tempDir();
  const path = join(home, 'metis.config.json');
  writeFileSync(path, JSON.stringify({ store: { working_copy: true } }));
  return { home, config: ['--config', path] };
}

const onPostgres = describe.skipIf(!postgresTestsRun);

function psqlIn(url: string, sql: string): string {
  return pg.psql(sql, new URL(url).pathname.slice(1)).trim();
}

/** Sends a message and waits for its turn to end. */
async function turn(service: RunningService, sessionId: string, message: string) {
  const token = service.auth.token;
  const submitted = await jsonRequest(
    service.url,
    'POST',
    `/sessions/${sessionId}/turns`,
    { message },
    { token },
  );
  expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
  await service.runtime.currentTurn(sessionId)?.done;
  return submitted;
}

async function newSession(service: RunningService): Promise<string> {
  const created = await jsonRequest(service.url, 'POST', '/sessions', {}, { token: service.auth.token });
  expect(created.status).toBe(201);
  return created.body.session_id;
}

/**
 * Per table, the row count and a digest of the rows' content in key order: in PostgreSQL, and in the
 * SQLite file. Equal digests mean the same rows with the same content, not only as many.
 */
function counts(url: string, dbPath: string) {
  // Every column, nulls spelled out, joined with a separator no value here holds.
  const row = (columns: string) =>
    columns
      .split(' ')
      .map((column) => `coalesce(CAST(${column} AS TEXT), '∅')`)
      .join(` || '¦' || `);
  const tables: [string, string, string][] = [
    [
      'sessions',
      'id',
      row(
        'id parent_session_id workspace_path workspace_hash active_model status disposition created_at_us updated_at_us sticky_model',
      ),
    ],
    [
      'events',
      'id',
      row('session_id id seq timestamp_us turn_id parent_event_id type actor sensitivity payload_json'),
    ],
    ['messages', 'id', row('id session_id turn_id role content_json status model usage_json created_at_us')],
    [
      'tool_calls',
      'row_id',
      row(
        'row_id id session_id turn_id message_id tool_name input_json status output_json error_class created_at_us updated_at_us',
      ),
    ],
  ];
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return {
      postgres: tables.map(([table, key, row]) =>
        psqlIn(
          url,
          `SELECT count(*) || ' ' || coalesce(md5(string_agg(${row}, '|' ORDER BY ${key})), '') FROM ${table}`,
        ),
      ),
      sqlite: tables.map(([table, key, row]) => {
        const rows = db.prepare(`SELECT ${row} FROM ${table} ORDER BY ${key}`).pluck().all() as string[];
        const digest = rows.length === 0 ? '' : createHash('md5').update(rows.join('|')).digest('hex');
        return `${rows.length} ${digest}`.trim(); // as psql prints it
      }),
    };
  } finally {
    db.close();
  }
}

onPostgres('metis serve on PostgreSQL', () => {
  it('metis serve --store passes the whole conformance suite, and the store exports what the server holds', async () => {
    const url = freshDatabase(pg);
    const { home, config } = workingCopyHome();
    const server = await serveCli(home, ['--conformance', '--store', url, ...config]);
    const banner = JSON.parse(server.stdout().split('\n')[0]!) as { db: string; store: string };
    expect(banner.store).toBe(url);
    expect(banner.db.startsWith(home)).toBe(true);
    const results = await runConformance({
      url: server.url,
      token: (await import('../helpers/home-token.js')).homeToken(home),
    });
    expect(results.filter((r) => r.outcome.status !== 'pass')).toEqual([]);
    expect(results.length).toBeGreaterThanOrEqual(20);
    expect(await server.stop('SIGTERM')).toBe(0);

    const fromPostgres = await runCli(['export', '--store', url], home);
    const fromCopy = await runCli(['export', '--db', banner.db], home);
    expect(fromPostgres.exitCode, fromPostgres.stderr).toBe(0);
    expect(fromCopy.exitCode, fromCopy.stderr).toBe(0);
    expect(fromPostgres.stdout.split('\n').length).toBeGreaterThan(500);
    expect(fromPostgres.stdout).toBe(fromCopy.stdout);
  }, 180_000);

  it('a restart reuses the working copy; a lost one is rebuilt from the store and the conversation goes on', async () => {
    const url = freshDatabase(pg);
    const dir = tempDir();
    let service = await serveOnStore(url, dir);
    const session = await newSession(service);
    await turn(service, session, 'hello');
    const copyPath = service.dbPath;
    await service.stop();
    const before = counts(url, copyPath);
    expect(before.postgres).toEqual(before.sqlite);
    expect(before.postgres[2]).toMatch(/^2 /); // the user's message and the answer

    const copyId = () => psqlIn(url, 'SELECT copy_id FROM metis_working_copies');
    const firstCopy = copyId();
    service = await serveOnStore(url, dir);
    expect(service.dbPath).toBe(copyPath);
    expect(copyId()).toBe(firstCopy); // reused, not rebuilt
    expect(service.runtime.sessions.getSession(session)?.status).toBe('active');
    await service.stop();

    rmSync(copyPath);
    service = await serveOnStore(url, dir);
    expect(existsSync(copyPath)).toBe(true);
    expect(copyId()).not.toBe(firstCopy);
    expect(service.runtime.sessions.messages(session).map((m) => m.role)).toEqual(['user', 'assistant']);
    await turn(service, session, 'think: time');
    const events = await jsonRequest(service.url, 'GET', `/sessions/${session}/trace`, undefined, {
      token: service.auth.token,
    });
    const seqs = (events.body.events as { seq: number; session_id: string }[])
      .filter((e) => e.session_id === session)
      .map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1)); // the rebuilt copy continues the session's seq
    const messages = service.runtime.sessions.messages(session).length;
    expect(messages).toBeGreaterThan(2);
    await service.stop();
    const after = counts(url, copyPath);
    expect(after.postgres).toEqual(after.sqlite);
    expect(after.postgres[2]).toMatch(new RegExp(`^${messages} `));
  }, 120_000);

  it('a PostgreSQL restart under load loses nothing; while it is down new turns are refused by name', async () => {
    const url = freshDatabase(pg);
    const service = await serveOnStore(url, tempDir());
    const sessions = await Promise.all([1, 2, 3].map(() => newSession(service)));
    const load = (async () => {
      for (let round = 0; round < 6; round += 1)
        await Promise.all(
          sessions.map((id) =>
            turn(service, id, 'think: time').catch(() => service.runtime.currentTurn(id)?.done),
          ),
        );
    })();
    await new Promise((resolve) => setTimeout(resolve, 300));
    await pg.stop();
    // Within a poll or two the server knows, and says so to a new turn.
    let refused: { status: number; body: any } | null = null;
    const extra = await newSession(service).catch(() => null);
    const deadline = Date.now() + 10_000;
    while (refused === null && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const attempt = await jsonRequest(
        service.url,
        'POST',
        `/sessions/${extra ?? sessions[0]}/turns`,
        { message: 'hello' },
        { token: service.auth.token },
      );
      if (attempt.status === 503) refused = attempt;
    }
    expect(refused?.body.error.code).toBe('METIS_ERR_STORE_UNAVAILABLE');
    // What the running turns did meanwhile is only local: that is what the restart must bring over.
    expect((service.trace.upstream as PgShipper).backlog).toBeGreaterThan(0);
    expect(refused?.body.error.message).toContain('is unreachable');
    expect(refused?.body.error.message).not.toMatch(/\n\s+at /);
    await pg.start();
    await load;
    expect(await service.trace.upstream!.whenShipped(30_000)).toBe(true);
    expect(service.trace.upstream!.failure).toBeNull();
    await service.stop();
    const { postgres, sqlite } = counts(url, service.dbPath);
    expect(postgres).toEqual(sqlite);
    // Every session's seq has no hole in PostgreSQL.
    expect(
      psqlIn(
        url,
        `SELECT count(*) FROM (SELECT session_id, count(*) AS n, max(seq) AS top FROM events GROUP BY session_id) s WHERE n <> top`,
      ),
    ).toBe('0');
  }, 120_000);

  it('a server killed while the database was away sends what its working copy holds at the next start', async () => {
    const url = freshDatabase(pg);
    const { home, config } = workingCopyHome();
    const first = await serveCli(home, ['--store', url, ...config]);
    const banner = JSON.parse(first.stdout().split('\n')[0]!) as { db: string };
    const session = (await jsonRequest(first.url, 'POST', '/sessions', {})).body.session_id;
    const turnId = (
      await jsonRequest(first.url, 'POST', `/sessions/${session}/turns`, { message: 'slow: a long answer' })
    ).body.turn_id;
    await new Promise((resolve) => setTimeout(resolve, 300));
    // The database goes away, the turn is cancelled, then the server dies: the cancellation is only local.
    await pg.stop();
    const cancelled = await jsonRequest(first.url, 'POST', `/sessions/${session}/turns/${turnId}/cancel`, {});
    expect(cancelled.status).toBe(202);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await first.stop('SIGKILL');
    await pg.start();
    const db = openDatabase(banner.db, { readonly: true });
    const unsent = db.prepare('SELECT count(*) FROM pg_outbox').pluck().get() as number;
    db.close();
    expect(unsent).toBeGreaterThan(0);
    const second = await serveCli(home, ['--store', url, ...config]);
    expect(await second.stop('SIGTERM')).toBe(0);
    const { postgres, sqlite } = counts(url, banner.db);
    expect(postgres).toEqual(sqlite);
    // The cancelled turn's end was sent by the second start.
    expect(
      psqlIn(url, "SELECT count(*) FROM events WHERE type IN ('turn.completed', 'turn.cancelled')"),
    ).toBe('1');
  }, 60_000);

  it('a store it cannot use stops the start with exit 2, naming the setting and the reason', async () => {
    const home = tempDir();
    pg.psql(
      `DO $$ BEGIN CREATE ROLE ${PASSWORD_ROLE} LOGIN PASSWORD 'right'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
    );
    pg.psql('DO $$ BEGIN CREATE ROLE reader LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$');
    const url = freshDatabase(pg);
    const half = freshDatabase(pg);
    psqlIn(half, 'CREATE TABLE events (id text)'); // a table of that name, and no metis_schema
    const newer = freshDatabase(pg);
    await serveOnStore(newer, tempDir()).then((service) => service.stop());
    psqlIn(newer, 'UPDATE metis_schema SET version = 99');
    const noRights = freshDatabase(pg);
    psqlIn(noRights, 'REVOKE CREATE ON SCHEMA public FROM PUBLIC');
    const cases: [string[], Record<string, string>, string][] = [
      [
        ['--store', url.replace('metis@', `${PASSWORD_ROLE}:wrong@`)],
        {},
        '--store: cannot use postgres://metis_password:***@',
      ],
      [['--store', `postgres://metis@127.0.0.1:${pg.port + 1}/x`], {}, 'nothing accepts connections there'],
      [[], { METIS_STORE_URL: url.replace(/\/[^/]+$/, '/no_such_db') }, '$METIS_STORE_URL: cannot use'],
      [['--store', noRights.replace('metis@', 'reader@')], {}, 'may not create'],
      [['--store', half], {}, 'half-migrated'],
      [['--store', newer], {}, 'schema version 99'],
      [['--store', 'sqlite.db'], {}, '--store: must be a postgres:// URL'],
      [
        ['--store', `${url}?sslmode=verify-full&sslrootcert=/nonexistent/root.crt`],
        {},
        '--store: cannot use',
      ],
    ];
    // Side by side: each start is its own process, and each waits on its own connection. Each in a home
    // of its own: two starts on one store share its working copy, and the one that holds the copy's lock
    // while it fails would make the other report the lock instead of its own reason.
    const results = await Promise.all(
      cases.map(([args, env]) => runCli(['serve', '--port', '0', ...args], tempDir(), env)),
    );
    for (const [index, [args, , expected]] of cases.entries()) {
      const result = results[index]!;
      expect(result.exitCode, `${args.join(' ')}\n${result.stderr}`).toBe(2);
      expect(result.stderr).toContain(expected);
      expect(result.stderr).not.toContain('wrong@');
      expect(result.stderr).not.toMatch(/\n\s+at /);
    }
    // Another server on the same store: refused while the first runs.
    const first = await serveOnStore(url, tempDir());
    const second = await runCli(['serve', '--port', '0', '--store', url], home);
    expect(second.exitCode).not.toBe(0);
    expect(second.stderr).toContain('another metis serve');
    await first.stop();
    // A user with rights on metis's tables and none to create tables runs on a store made before.
    pg.psql('DO $$ BEGIN CREATE ROLE writer LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$');
    psqlIn(url, 'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO writer');
    psqlIn(url, 'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO writer');
    const least = await serveOnStore(url.replace('metis@', 'writer@'), tempDir());
    expect(least.store).toContain('writer@');
    await least.stop();
  }, 120_000);
});
