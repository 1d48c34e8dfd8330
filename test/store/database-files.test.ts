import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { acquireLock } from '../../src/core/store/lock.js';
import { purgeOldEvents } from '../../src/core/store/retention.js';
import { SCHEMA_VERSION } from '../../src/core/store/schema.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { sessionCreated } from '../helpers/events.js';
import { DROP_BUDGET_COLUMNS } from '../helpers/old-schema.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

const modeOf = (path: string) => statSync(path).mode & 0o777;
const digest = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

describe('database files', () => {
  it('a new database gets a 0700 folder, and the file and its -wal and -shm are 0600', async () => {
    const folder = join(tempDir(), 'home');
    const dbPath = join(folder, 'metis.db');
    const context = tempTraceContext({ dbPath });
    context.bus.emit(sessionCreated('sess_a'));
    await context.flush();
    expect(modeOf(folder)).toBe(0o700);
    for (const file of [dbPath, `${dbPath}-wal`, `${dbPath}-shm`]) {
      expect(existsSync(file), file).toBe(true);
      expect(modeOf(file).toString(8), file).toBe('600');
    }
  });

  it('the server lock may be the first file of a new folder, which it creates 0700', () => {
    const folder = join(tempDir(), 'not-yet');
    const release = acquireLock(join(folder, 'metis.db'));
    try {
      expect(modeOf(folder)).toBe(0o700);
      expect(readFileSync(join(folder, 'metis.db.lock'), 'utf8').trim()).toBe(String(process.pid));
    } finally {
      release();
    }
    expect(existsSync(join(folder, 'metis.db.lock'))).toBe(false);
  });

  it('refuses a SQLite file that is not a metis database and leaves it byte for byte as it was', async () => {
    const dbPath = join(tempDir(), 'foreign.db');
    const foreign = new Database(dbPath);
    foreign.exec('CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES (1)');
    foreign.close();
    const before = digest(dbPath);
    expect(() => openDatabase(dbPath, { create: true })).toThrow(/is a SQLite database but not a metis one/);
    await expect(purgeOldEvents({ dbPath, days: 1 })).rejects.toThrow(/not a metis one/);
    expect(digest(dbPath)).toBe(before);
    expect(existsSync(`${dbPath}-wal`)).toBe(false);
    const reopened = new Database(dbPath, { readonly: true });
    expect(reopened.pragma('journal_mode', { simple: true })).toBe('delete');
    reopened.close();
  });

  it('an empty file is a new database only where one may be created', async () => {
    const dbPath = join(tempDir(), 'empty.db');
    writeFileSync(dbPath, '');
    await expect(purgeOldEvents({ dbPath, days: 1 })).rejects.toThrow(
      /is not a metis database \(it is empty\)/,
    );
    expect(statSync(dbPath).size).toBe(0);
    // A server that crashed between creating the file and its first migration starts again.
    const db = openDatabase(dbPath, { create: true });
    expect(db.pragma('user_version', { simple: true })).toBeGreaterThan(0);
    db.close();
  });
});

describe('schema migrations', () => {
  it('version 8 gives the sessions of a version-7 database no caps and nothing spent', async () => {
    const dbPath = join(tempDir(), 'v7.db');
    const context = openTraceContext({ dbPath, validation: 'strict' });
    context.bus.emit(sessionCreated('sess_before_budgets'));
    await context.flush();
    await context.close();
    const old = new Database(dbPath);
    old.exec(DROP_BUDGET_COLUMNS);
    old.pragma('user_version = 7');
    old.close();

    const db = openDatabase(dbPath);
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      expect(
        db
          .prepare(
            "SELECT budget_caps_json, spent_usd, spent_tokens FROM sessions WHERE id = 'sess_before_budgets'",
          )
          .get(),
      ).toEqual({ budget_caps_json: null, spent_usd: 0, spent_tokens: 0 });
    } finally {
      db.close();
    }
  });

  it('version 2 adds sessions.sticky_model, filled from session.created for version-1 databases', async () => {
    const dbPath = join(tempDir(), 'v1.db');
    const context = openTraceContext({ dbPath, validation: 'strict' });
    context.bus.emit(sessionCreated('sess_pinned'));
    context.bus.emit({
      ...sessionCreated('sess_unpinned'),
      payload: { ...sessionCreated('x').payload, initial_active_model: null },
    });
    await context.flush();
    await context.close();
    // Make it the database a version-1 metis wrote.
    const old = new Database(dbPath);
    old.exec(`ALTER TABLE sessions DROP COLUMN sticky_model; ${DROP_BUDGET_COLUMNS}`);
    old.pragma('user_version = 1');
    old.close();

    const db = openDatabase(dbPath);
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      const sticky = db
        .prepare("SELECT id, sticky_model FROM sessions WHERE id LIKE 'sess_%' ORDER BY id")
        .all();
      expect(sticky).toEqual([
        { id: 'sess_pinned', sticky_model: 'scripted:demo' },
        { id: 'sess_unpinned', sticky_model: null },
      ]);
    } finally {
      db.close();
    }
  });
});
