import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../../src/core/store/schema.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/** A METIS_HOME whose default database holds old and recent events. */
async function home(): Promise<{ home: string; dbPath: string }> {
  const dir = tempDir();
  const context = tempTraceContext({ dbPath: join(dir, 'metis.db') });
  insertOldEvents(context.db, { sessionId: 'sess_old', ageDays: 100, count: 4 });
  context.bus.emit(sessionCreated('sess_new'));
  context.bus.emit(turnStarted('sess_new'));
  await context.close();
  return { home: dir, dbPath: context.dbPath };
}

describe('store commands (real CLI process)', () => {
  it('fails with a named error for a missing --db, a non-database file and bad flags', async () => {
    const dir = tempDir();
    const junk = join(dir, 'junk.db');
    writeFileSync(junk, randomBytes(8192));

    const missing = await runCli(['trace', 'stats', '--db', join(dir, 'nope.db')], dir);
    expect(missing.exitCode).toBe(1);
    expect(missing.stderr).toMatch(/^error: no database at .*nope\.db$/m);
    expect(existsSync(join(dir, 'nope.db'))).toBe(false);

    for (const args of [['trace', 'stats'], ['trace', 'prune'], ['export'], ['backup', join(dir, 'b.db')]]) {
      const result = await runCli([...args, '--db', junk], dir);
      expect(result.exitCode, args.join(' ')).toBe(1);
      expect(result.stderr).toMatch(/^error: .*junk\.db is not a SQLite database/m);
    }

    const days = await runCli(['trace', 'prune', '--days', 'ten', '--db', junk], dir);
    expect(days.exitCode).toBe(2);
    expect(days.stderr).toMatch(
      /^error: --days must be a whole number of days from 1 to 1,000,000, got "ten"$/m,
    );

    const type = await runCli(['export', '--type', 'turn.started', 'nope.event', '--db', junk], dir);
    expect(type.exitCode).toBe(2);
    expect(type.stderr).toMatch(/^error: --type: unknown event type "nope\.event"$/m);

    const restore = await runCli(['restore', join(dir, 'gone.db')], dir);
    expect(restore.exitCode).toBe(1);
    expect(restore.stderr).toMatch(/^error: no backup at .*gone\.db; nothing was changed$/m);
    expect(existsSync(join(dir, 'metis.db'))).toBe(false);
  }, 60_000);

  it('prunes, backs up, restores, exports and reports stats on the METIS_HOME database', async () => {
    const { home: dir, dbPath } = await home();

    const dry = await runCli(['trace', 'prune', '--dry-run'], dir);
    expect(dry.exitCode).toBe(0);
    expect(dry.stdout).toMatch(
      /^dry run: would delete 4 events older than .* \(90 days\); nothing was changed$/m,
    );
    expect(dry.stdout).toMatch(/^ {2}turn\.started {2}4$/m);

    const pruned = await runCli(['trace', 'prune'], dir);
    expect(pruned.exitCode).toBe(0);
    expect(pruned.stdout).toMatch(/^deleted 4 events older than .* \(90 days\) in 1 batch$/m);
    expect(pruned.stdout).toMatch(/^the file keeps its size: SQLite reuses the freed pages/m);

    const dest = join(dir, 'backup.db');
    const backup = await runCli(['backup', dest], dir);
    expect(backup.exitCode).toBe(0);
    expect(backup.stdout).toContain(`source: ${dbPath}\ndest: ${dest}\nbytes: `);
    const again = await runCli(['backup', dest, '--json'], dir);
    expect(again.exitCode).toBe(1);
    // Under --json the error is JSON on stderr.
    expect(JSON.parse(again.stderr).error).toMatchObject({
      code: 'METIS_ERR_DEST_EXISTS',
      message: expect.stringMatching(/backup\.db already exists/),
    });

    const target = join(dir, 'restored', 'metis.db');
    const restored = await runCli(['restore', dest, '--db', target, '--json'], dir);
    expect(restored.exitCode).toBe(0);
    expect(JSON.parse(restored.stdout)).toMatchObject({ source: dest, target, replaced: false });
    const refused = await runCli(['restore', dest, '--db', target], dir);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toMatch(/hint: Pass --force/);

    const exported = await runCli(['export', '--db', target, '--session', 'sess_new'], dir);
    expect(exported.exitCode).toBe(0);
    const lines = exported.stdout.trim().split('\n');
    expect(lines.map((l) => (JSON.parse(l) as { type: string }).type)).toEqual([
      'session.created',
      'turn.started',
    ]);

    const out = join(dir, 'audit.csv');
    const toFile = await runCli(['export', '--audit', '--format', 'csv', '--out', out], dir);
    expect(toFile.exitCode).toBe(0);
    expect(toFile.stderr.trim()).toBe(`exported 1 event to ${out}`); // the trace.swept of the prune
    expect(readFileSync(out, 'utf8')).toMatch(/^id,timestamp,.*\r\n.*trace\.swept/);

    const stats = await runCli(['trace', 'stats'], dir);
    expect(stats.exitCode).toBe(0);
    expect(stats.stdout).toMatch(new RegExp(`^schema version: ${SCHEMA_VERSION}$`, 'm'));
    expect(stats.stdout).toMatch(/^events by session:$/m);
    expect(stats.stdout).toMatch(/^ {2}sess_new +2$/m);
  }, 60_000);

  it('takes the database and the retention window from --config, as metis serve does', async () => {
    const { home: dir, dbPath } = await home();
    const configPath = join(tempDir(), 'metis.config.json');
    // 100-day-old events: the default window (90) would delete them, this config's (200) keeps them.
    writeFileSync(configPath, JSON.stringify({ storage: { database: dbPath, retention_days: 200 } }));
    const elsewhere = tempDir();

    const stats = await runCli(['trace', 'stats', '--json', '--config', configPath], elsewhere);
    expect(stats.exitCode, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout).db_path).toBe(dbPath);

    const kept = await runCli(['trace', 'prune', '--dry-run', '--json', '--config', configPath], elsewhere);
    expect(kept.exitCode, kept.stderr).toBe(0);
    expect(JSON.parse(kept.stdout).rows_deleted).toBe(0);
    const flag = await runCli(
      ['trace', 'prune', '--dry-run', '--json', '--days', '90', '--config', configPath],
      dir,
    );
    expect(JSON.parse(flag.stdout).rows_deleted).toBe(4);

    const backup = join(elsewhere, 'backup.db');
    const backedUp = await runCli(['backup', backup, '--json', '--config', configPath], elsewhere);
    expect(backedUp.exitCode, backedUp.stderr).toBe(0);
    expect(JSON.parse(backedUp.stdout).source).toBe(dbPath);

    const exported = await runCli(['export', '--session', 'sess_new', '--config', configPath], elsewhere);
    expect(
      exported.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line).type),
    ).toEqual(['session.created', 'turn.started']);
  });

  it('documents every flag in --help', async () => {
    const dir = tempDir();
    const expected: Record<string, string[]> = {
      'trace prune': ['--days', '--dry-run', '--db', '--json'],
      'trace stats': ['--db', '--json'],
      backup: ['<dest>', '--db', '--json'],
      restore: ['<src>', '--db', '--force', '--json'],
      export: [
        '--session',
        '--type',
        '--since',
        '--until',
        '--max-sensitivity',
        '--audit',
        '--format',
        '--out',
        '--db',
      ],
    };
    for (const [command, flags] of Object.entries(expected)) {
      const help = await runCli([...command.split(' '), '--help'], dir);
      expect(help.exitCode).toBe(0);
      for (const flag of flags) expect(help.stdout, `${command} ${flag}`).toContain(flag);
    }
  }, 60_000);
});
