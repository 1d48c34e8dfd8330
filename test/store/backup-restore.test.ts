import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { backupDatabase } from '../../src/core/store/backup.js';
import { openDatabase } from '../../src/core/store/database.js';
import { parseExportFlags, writeExport } from '../../src/core/store/export.js';
import { lockPathFor } from '../../src/core/store/lock.js';
import { restoreDatabase } from '../../src/core/store/restore.js';
import { SCHEMA_VERSION } from '../../src/core/store/schema.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

const CHILD = join(import.meta.dirname, '../fixtures/ingest-child.ts');

const hash = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const mode = (path: string) => statSync(path).mode & 0o777;

/** A closed database with a few sessions; `bulk` adds that many rows so the file spans many pages. */
async function database(bulk = 0): Promise<string> {
  const context = tempTraceContext();
  if (bulk > 0)
    insertOldEvents(context.db, {
      sessionId: 'sess_bulk',
      ageDays: 1,
      count: bulk,
      payload: { text: 'x'.repeat(200) },
    });
  for (const id of ['sess_a', 'sess_b']) {
    context.bus.emit(sessionCreated(id));
    context.bus.emit(turnStarted(id));
  }
  await context.close();
  return context.dbPath;
}

/** A JSONL export of a database, per session. */
async function exportBySession(dbPath: string): Promise<Map<string, string[]>> {
  const db = openDatabase(dbPath, { readonly: true });
  let text = '';
  const sink = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  });
  await writeExport(db, parseExportFlags({}), sink);
  db.close();
  const bySession = new Map<string, string[]>();
  for (const line of text.split('\n').filter(Boolean)) {
    const session = (JSON.parse(line) as { session_id: string }).session_id;
    bySession.set(session, [...(bySession.get(session) ?? []), line]);
  }
  return bySession;
}

describe('backup', () => {
  it('writes a private, self-contained, deterministic snapshot and never overwrites', async () => {
    const dbPath = await database();
    const dir = tempDir();
    const dest = join(dir, 'one.db');
    const result = backupDatabase({ dbPath, dest });
    expect(result).toEqual({
      source: dbPath,
      dest,
      bytes: statSync(dest).size,
      schema_version: SCHEMA_VERSION,
      event_count: expect.any(Number),
      oldest_event_timestamp: expect.stringMatching(/Z$/),
      newest_event_timestamp: expect.stringMatching(/Z$/),
    });
    expect(result.event_count).toBeGreaterThanOrEqual(4);
    expect(mode(dest)).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['one.db']); // no -wal/-shm companions, no temp file

    const again = backupDatabase({ dbPath, dest: join(dir, 'two.db') });
    expect({ ...again, dest }).toEqual(result);

    const before = hash(dest);
    expect(() => backupDatabase({ dbPath, dest })).toThrowError(
      expect.objectContaining({ code: 'METIS_ERR_DEST_EXISTS' }),
    );
    expect(hash(dest)).toBe(before);
    expect(() => backupDatabase({ dbPath, dest: join(dir, 'no/such/folder.db') })).toThrowError(
      /does not exist/,
    );
    expect(() => backupDatabase({ dbPath: join(dir, 'missing.db'), dest: join(dir, 'x.db') })).toThrowError(
      expect.objectContaining({ code: 'METIS_ERR_DB_NOT_FOUND' }),
    );
  });

  it('backs up while another process writes; the restored copy holds each session up to the backup point', async () => {
    const dbPath = await database();
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dbPath], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let lines = 0;
    child.stdout.on('data', (chunk) => {
      lines += String(chunk).split('\n').length - 1;
    });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    const waitForLines = async (n: number) => {
      while (lines < n) await new Promise((r) => setTimeout(r, 10));
    };
    await waitForLines(5);
    const dest = join(tempDir(), 'hot.db');
    const backup = backupDatabase({ dbPath, dest });
    await waitForLines(lines + 5); // the writer keeps committing after the snapshot
    child.kill('SIGKILL');
    await exited;

    const restored = join(tempDir(), 'fresh', 'metis.db');
    const result = restoreDatabase({ src: dest, dbPath: restored });
    expect(result).toMatchObject({
      source: dest,
      target: restored,
      replaced: false,
      event_count: backup.event_count,
    });
    expect(mode(restored)).toBe(0o600);

    const live = await exportBySession(dbPath);
    const copy = await exportBySession(restored);
    expect(await exportBySession(dest)).toEqual(copy);
    expect(copy.size).toBeGreaterThan(3);
    let liveTotal = 0;
    for (const [session, events] of copy) {
      const liveEvents = live.get(session) ?? [];
      liveTotal += liveEvents.length;
      expect(liveEvents.slice(0, events.length)).toEqual(events); // a prefix of the live session
    }
    expect(liveTotal).toBeGreaterThan(backup.event_count); // writes went on after the snapshot
  }, 60_000);
});

describe('restore refusals leave the target byte-identical', () => {
  async function setup(bulk = 0) {
    const backupDir = tempDir();
    const src = join(backupDir, 'backup.db');
    backupDatabase({ dbPath: await database(bulk), dest: src });
    const target = await database();
    const targetDir = join(target, '..');
    return {
      src,
      backupDir,
      target,
      targetDir,
      before: hash(target),
      listing: readdirSync(targetDir).sort(),
    };
  }

  async function expectRefused(
    run: () => unknown,
    code: string,
    message: RegExp,
    target: string,
    before: string,
    listing: string[],
  ) {
    expect(run).toThrowError(expect.objectContaining({ code, message: expect.stringMatching(message) }));
    expect(hash(target)).toBe(before);
    expect(readdirSync(join(target, '..')).sort()).toEqual(listing);
  }

  it('refuses a missing source, -wal/-shm companions and a non-metis file', async () => {
    const { src, backupDir, target, before, listing } = await setup();
    const restore = (from: string) => () => restoreDatabase({ src: from, dbPath: target, force: true });
    await expectRefused(
      restore(join(backupDir, 'nope.db')),
      'METIS_ERR_RESTORE_REFUSED',
      /no backup at/,
      target,
      before,
      listing,
    );
    for (const suffix of ['-wal', '-shm']) {
      const withCompanion = join(tempDir(), 'b.db');
      copyFileSync(src, withCompanion);
      writeFileSync(`${withCompanion}${suffix}`, '');
      await expectRefused(
        restore(withCompanion),
        'METIS_ERR_RESTORE_REFUSED',
        new RegExp(`${suffix} exists`),
        target,
        before,
        listing,
      );
    }
    const random = join(backupDir, 'random.bin');
    writeFileSync(random, Buffer.alloc(8192, 7));
    await expectRefused(
      restore(random),
      'METIS_ERR_NOT_A_METIS_DB',
      /not a SQLite database/,
      target,
      before,
      listing,
    );
    const foreign = join(backupDir, 'foreign.db');
    const other = new Database(foreign);
    other.exec('CREATE TABLE t (x)');
    other.close();
    await expectRefused(
      restore(foreign),
      'METIS_ERR_NOT_A_METIS_DB',
      /not a metis database/,
      target,
      before,
      listing,
    );
  });

  it('refuses another schema version, naming both versions', async () => {
    const { src, target, before, listing } = await setup();
    const db = new Database(src);
    db.pragma('user_version = 99');
    db.close();
    const message = new RegExp(`schema version 99.*schema version ${SCHEMA_VERSION}`);
    await expectRefused(
      () => restoreDatabase({ src, dbPath: target, force: true }),
      'METIS_ERR_SCHEMA_VERSION',
      message,
      target,
      before,
      listing,
    );
  });

  it('refuses a backup that fails integrity_check', async () => {
    const { src, target, before, listing } = await setup(3000);
    const pageSize = 4096;
    const pages = statSync(src).size / pageSize;
    expect(pages).toBeGreaterThan(50);
    const fd = openSync(src, 'r+');
    for (const page of [Math.floor(pages / 2), Math.floor(pages / 2) + 1]) {
      writeSync(fd, Buffer.alloc(600, 0xff), 0, 600, page * pageSize + 8); // cell pointers and cells
    }
    await expectRefused(
      () => restoreDatabase({ src, dbPath: target, force: true }),
      'METIS_ERR_INTEGRITY',
      /integrity_check|damaged/,
      target,
      before,
      listing,
    );
  });

  it('refuses an existing target without --force, and a target held by a live process', async () => {
    const { src, target, before, listing } = await setup();
    await expectRefused(
      () => restoreDatabase({ src, dbPath: target }),
      'METIS_ERR_DEST_EXISTS',
      /already exists/,
      target,
      before,
      listing,
    );
    writeFileSync(lockPathFor(target), `${process.pid}\n`);
    const locked = [...listing, `${target.split('/').pop()}.lock`].sort();
    await expectRefused(
      () => restoreDatabase({ src, dbPath: target, force: true }),
      'METIS_ERR_DB_LOCKED',
      new RegExp(`pid ${process.pid}`),
      target,
      before,
      locked,
    );
  });
});

describe('restore --force', () => {
  it('replaces the database and drops its stale -wal/-shm instead of replaying them', async () => {
    const src = join(tempDir(), 'backup.db');
    const backup = backupDatabase({ dbPath: await database(), dest: src });
    const target = await database(500);
    writeFileSync(`${target}-wal`, Buffer.alloc(4096, 1));
    writeFileSync(`${target}-shm`, Buffer.alloc(32768, 1));

    const result = restoreDatabase({ src, dbPath: target, force: true });
    expect(result).toMatchObject({ target, replaced: true, event_count: backup.event_count });
    expect(existsSync(`${target}-wal`)).toBe(false);
    expect(existsSync(lockPathFor(target))).toBe(false);
    expect(mode(target)).toBe(0o600);
    expect(readdirSync(join(target, '..')).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    const db = openDatabase(target);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(db.prepare('SELECT count(*) FROM events').pluck().get()).toBe(backup.event_count);
    db.close();
    expect(await exportBySession(target)).toEqual(await exportBySession(src));
  });
});
