import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { exportDatabase, parseExportFlags } from '../../src/core/store/export.js';
import { copyStore } from '../../src/core/store/store-copy.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 19 point 3 and its done-when: `metis store copy` moves a whole store SQLite → PostgreSQL →
 * SQLite, verified, and the store that comes back exports byte-identical JSONL.
 */

const pg = postgresForFile();

async function exportJsonl(dbPath: string): Promise<string> {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  await exportDatabase({ dbPath, query: parseExportFlags({}), stream });
  return Buffer.concat(chunks).toString('utf8');
}

function tableRows(dbPath: string, table: string, order: string): unknown[] {
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return db.prepare(`SELECT * FROM ${table} ORDER BY ${order}`).all();
  } finally {
    db.close();
  }
}

/** A store with what a real server writes: turns with thinking, a tool, a delegation, ended sessions. */
async function busyStore(): Promise<string> {
  const t = await startTestServer();
  const first = await t.createSession();
  for (const message of ['think: time', 'run: printf "tab\\there"', 'delegate: count the files', 'hello'])
    await t.submit(first, message).then(() => t.runtime.currentTurn(first)?.done);
  // A workspace whose name holds a tab, a newline and a backslash: text columns a text format must escape.
  const odd = tempDir('metis-ws-\t\n\\-');
  const second = (await t.request('POST', '/sessions', { workspace_path: odd })).body.session_id;
  await t.submit(second, 'think: é 🙂 "quoted"');
  await t.runtime.currentTurn(second)?.done;
  await t.request('POST', `/sessions/${second}/end`, {});
  // Stopped, so nothing more is written (the evaluator scores ended sessions a moment later).
  await t.server.close();
  await t.runtime.close();
  await t.context.close();
  return t.context.dbPath;
}

describe.runIf(postgresTestsRun)('metis store copy', () => {
  it('SQLite → PostgreSQL → SQLite: every table the same, and the export byte-identical', async () => {
    const original = await busyStore();
    const url = freshDatabase(pg);
    const progress: string[] = [];
    const there = await copyStore({
      from: original,
      to: url,
      onProgress: ({ table }) => progress.push(table),
    });
    expect([...new Set(progress)]).toEqual(
      expect.arrayContaining(['sessions', 'events', 'messages', 'tool_calls']),
    );
    const rows = Object.fromEntries(there.tables.map((table) => [table.name, table.rows]));
    expect(rows.events).toBeGreaterThan(50);
    expect(rows.sessions).toBe(4); // two sessions, a worker, and the system session
    expect(tableRows(original, 'sessions', 'id')).toContainEqual(
      expect.objectContaining({ workspace_path: expect.stringContaining('\t\n\\') }),
    );
    expect(there.sessions).toBeGreaterThanOrEqual(3);

    const back = join(tempDir('metis-copy-'), 'back.db');
    const returned = await copyStore({ from: url, to: back });
    expect(returned.tables).toEqual(there.tables);

    const exported = await exportJsonl(original);
    expect(exported.split('\n').length).toBeGreaterThan(50);
    expect(await exportJsonl(back)).toBe(exported);
    for (const [table, order] of [
      ['sessions', 'id'],
      ['messages', 'id'],
      ['tool_calls', 'row_id'],
      ['pattern_fingerprints', 'id'],
      ['pattern_outcomes', 'id'],
    ] as const)
      expect(tableRows(back, table, order), table).toEqual(tableRows(original, table, order));
  }, 60_000);

  it('from the command line: --json report, a destination that exists refused, a bad URL named without its password', async () => {
    const original = await busyStore();
    const home = tempDir('metis-home-');
    const url = freshDatabase(pg);
    const copied = await runCli(['store', 'copy', '--from', original, '--to', url, '--json'], home);
    expect(copied.stderr).toBe('');
    expect(copied.exitCode).toBe(0);
    expect(JSON.parse(copied.stdout)).toMatchObject({
      from: original,
      to: url,
      sessions: expect.any(Number),
    });

    const again = await runCli(['store', 'copy', '--from', original, '--to', url], home);
    expect(again.exitCode).toBe(1);
    expect(again.stderr).toContain('already holds a metis store');

    const onto = await runCli(['store', 'copy', '--from', url, '--to', original], home);
    expect(onto.exitCode).toBe(1);
    expect(onto.stderr).toContain(`--to: ${original} exists`);

    // A database without a metis store is no source, and is left as it was (no tables made in it).
    const empty = freshDatabase(pg);
    const noStore = await runCli(['store', 'copy', '--from', empty, '--to', join(home, 'x.db')], home);
    expect(noStore.exitCode).not.toBe(0);
    expect(noStore.stderr).toContain('holds no metis store');
    expect(
      pg
        .psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", new URL(empty).pathname.slice(1))
        .trim(),
    ).toBe('0');

    // A user who may not create tables there: named, with PostgreSQL's reason.
    pg.psql('CREATE ROLE limited LOGIN');
    const limitedUrl = freshDatabase(pg).replace('metis@', 'limited@');
    const limited = await runCli(['store', 'copy', '--from', original, '--to', limitedUrl], home);
    expect(limited.exitCode).toBe(2);
    expect(limited.stderr).toContain('--to: cannot use postgres://limited@');
    expect(limited.stderr).toContain('permission denied');

    const wrong = `postgres://metis:s3cret-word@127.0.0.1:${pg.port + 1}/nowhere`;
    const unreachable = await runCli(['store', 'copy', '--from', original, '--to', wrong], home);
    expect(unreachable.exitCode).toBe(2);
    expect(unreachable.stderr).toContain('--to: cannot use postgres://metis:***@127.0.0.1');
    expect(unreachable.stderr).not.toContain('s3cret-word');
    expect(unreachable.stderr).not.toMatch(/\n\s+at /);
  }, 60_000);

  it('metis export and metis trace stats print the same for the same events on PostgreSQL as on SQLite', async () => {
    const original = await busyStore();
    const url = freshDatabase(pg);
    await copyStore({ from: original, to: url });
    const home = tempDir('metis-home-');
    const session = JSON.parse(
      (await runCli(['trace', 'stats', '--json', '--db', original], home)).stdout,
    ).by_session.find((s: { session_id: string }) => s.session_id.startsWith('sess_')).session_id;
    for (const flags of [
      [],
      ['--format', 'csv'],
      ['--session', session],
      ['--type', 'turn.started,tool.called'],
      ['--max-sensitivity', 'pseudonymous'],
      ['--since', '2000-01-01T00:00:00Z', '--until', '2999-01-01T00:00:00Z'],
    ]) {
      const fromFile = await runCli(['export', '--db', original, ...flags], home);
      const fromPostgres = await runCli(['export', '--store', url, ...flags], home);
      expect(fromPostgres.stderr, flags.join(' ')).toBe('');
      expect(fromFile.stdout.length, flags.join(' ')).toBeGreaterThan(100);
      expect(fromPostgres.stdout, flags.join(' ')).toBe(fromFile.stdout);
    }
    const statsOf = async (args: string[]) => {
      const {
        db_path: _,
        file_bytes: __,
        wal_bytes: ___,
        ...rest
      } = JSON.parse((await runCli(['trace', 'stats', '--json', ...args], home)).stdout);
      return rest;
    };
    const sqliteStats = await statsOf(['--db', original]);
    expect(sqliteStats.event_count).toBeGreaterThan(50);
    expect(await statsOf(['--store', url])).toEqual({ ...sqliteStats, schema_version: expect.any(Number) });
    const human = await runCli(['trace', 'stats', '--store', url], home);
    expect(human.stdout).toContain(`events: ${sqliteStats.event_count}`);
    expect(human.stdout).not.toContain('s3cret');
    const notPostgres = await runCli(['export', '--store', original], home);
    expect(notPostgres.exitCode).toBe(2);
    expect(notPostgres.stderr).toContain('--store: must be a postgres:// URL');
  }, 90_000);

  it('metis backup of a PostgreSQL store writes the portable SQLite file; metis restore puts it into either backend', async () => {
    const original = await busyStore();
    const home = tempDir('metis-home-');
    const url = freshDatabase(pg);
    await copyStore({ from: original, to: url });
    const exported = await exportJsonl(original);

    const backup = join(tempDir('metis-backup-'), 'store.backup');
    const backedUp = await runCli(['backup', backup, '--store', url, '--json'], home);
    expect(backedUp.stderr).toBe('');
    expect(backedUp.exitCode).toBe(0);
    expect(JSON.parse(backedUp.stdout)).toMatchObject({
      dest: backup,
      event_count: exported.split('\n').length - 1,
    });
    expect((await runCli(['backup', backup, '--store', url], home)).exitCode).toBe(1); // never overwrites

    // Into SQLite, as any backup.
    const restoredFile = join(tempDir('metis-restored-'), 'metis.db');
    expect((await runCli(['restore', backup, '--db', restoredFile], home)).exitCode).toBe(0);
    expect(await exportJsonl(restoredFile)).toBe(exported);

    // Into PostgreSQL: a database holding a store is refused without --force, and nothing changes.
    const target = freshDatabase(pg);
    await copyStore({ from: original, to: target });
    pg.psql("DELETE FROM events WHERE type = 'turn.started'", new URL(target).pathname.slice(1));
    const refused = await runCli(['restore', backup, '--store', target], home);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain('already holds a metis store; nothing was changed');
    const restoredInto = await runCli(['restore', backup, '--store', target, '--force', '--json'], home);
    expect(restoredInto.stderr).toBe('');
    expect(restoredInto.exitCode).toBe(0);
    // (runCli drops the output's final newline)
    const roundTrip = await runCli(['export', '--store', target], home);
    expect(`${roundTrip.stdout}\n`).toBe(exported);

    // A file that is not a backup is refused before anything is touched.
    const notBackup = join(tempDir('metis-junk-'), 'junk.db');
    writeFileSync(notBackup, 'not a database at all, just some text that is long enough');
    const junk = await runCli(['restore', notBackup, '--store', target, '--force'], home);
    expect(junk.exitCode).not.toBe(0);
    expect(junk.stderr).toContain('is not a SQLite database; nothing was changed');
    expect(`${(await runCli(['export', '--store', target], home)).stdout}\n`).toBe(exported);
  }, 90_000);
});
