import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { MetisError } from '../errors.js';
import { microsToIso } from '../events/clock.js';
import { type Db, openDatabase } from './database.js';

/** What `metis backup` wrote (bus §7.5). Deterministic: the same database gives the same result. */
export interface BackupResult {
  readonly source: string;
  readonly dest: string;
  readonly bytes: number;
  readonly schema_version: number;
  readonly event_count: number;
  readonly oldest_event_timestamp: string | null;
  readonly newest_event_timestamp: string | null;
}

export interface DatabaseSummary {
  readonly schema_version: number;
  readonly event_count: number;
  readonly oldest_event_timestamp: string | null;
  readonly newest_event_timestamp: string | null;
}

/** Version, event count and the oldest/newest event (by id order) of an open metis database. */
export function summarizeDatabase(db: Db): DatabaseSummary {
  const edge = (order: 'ASC' | 'DESC') => {
    const us = db.prepare(`SELECT timestamp_us FROM events ORDER BY id ${order} LIMIT 1`).pluck().get();
    return us === undefined ? null : microsToIso(us as number);
  };
  return {
    schema_version: db.pragma('user_version', { simple: true }) as number,
    event_count: db.prepare('SELECT count(*) FROM events').pluck().get() as number,
    oldest_event_timestamp: edge('ASC'),
    newest_event_timestamp: edge('DESC'),
  };
}

/** Flushes a file's data to disk. */
export function fsyncFile(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Makes a rename or a new name in `dir` durable; best effort where directories cannot be fsynced. */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Some platforms and filesystems refuse fsync on a directory; the rename itself is still atomic.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** A temp name next to `path` (same folder, so a rename onto `path` is atomic). */
export function tempPathNextTo(path: string, purpose: string): string {
  return join(dirname(path), `.${basename(path)}.${purpose}-${process.pid}.tmp`);
}

/** Gives `tmp` the name `dest` only if `dest` does not exist (a hard link cannot clobber). */
export function publishNoClobber(tmp: string, dest: string): void {
  try {
    linkSync(tmp, dest);
    rmSync(tmp);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new MetisError('METIS_ERR_DEST_EXISTS', `${dest} already exists`);
    if (existsSync(dest)) throw error;
    renameSync(tmp, dest); // filesystems without hard links
  }
}

/** A backup's destination: a new file in an existing folder. */
export function checkBackupDest(dest: string): void {
  if (existsSync(dest)) {
    throw new MetisError(
      'METIS_ERR_DEST_EXISTS',
      statSync(dest).isDirectory()
        ? `${dest} is a folder; name the backup file to create in it`
        : `${dest} already exists; a backup never overwrites a file`,
    );
  }
  if (!existsSync(dirname(dest)) || !statSync(dirname(dest)).isDirectory()) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `the folder ${dirname(dest)} does not exist`, {
      hint: 'Create the folder first, or choose a destination in an existing folder.',
    });
  }
}

/**
 * Turns a written temp copy into the backup: rollback-journal mode (one self-contained file), mode
 * 0600, fsynced, then given its name without overwriting anything; returns what it holds.
 */
export function publishBackupFile(tmp: string, dest: string): DatabaseSummary {
  const copy = new Database(tmp, { fileMustExist: true });
  let summary: DatabaseSummary;
  try {
    copy.pragma('trusted_schema = OFF');
    copy.pragma('journal_mode = DELETE');
    summary = summarizeDatabase(copy);
  } finally {
    copy.close();
  }
  chmodSync(tmp, 0o600);
  fsyncFile(tmp);
  publishNoClobber(tmp, dest);
  fsyncDir(dirname(dest));
  return summary;
}

/**
 * Hot backup (bus §7.5): `VACUUM INTO` a private temp file next to `dest` (a consistent snapshot; a
 * server in another process keeps writing), switched to rollback-journal mode so the backup is one
 * self-contained file, fsynced, then given its name and mode 0600. Never overwrites `dest`.
 * @throws MetisError METIS_ERR_DEST_EXISTS, METIS_ERR_DB_NOT_FOUND, METIS_ERR_NOT_A_METIS_DB.
 */
export function backupDatabase(options: { readonly dbPath: string; readonly dest: string }): BackupResult {
  const source = resolve(options.dbPath);
  const dest = resolve(options.dest);
  checkBackupDest(dest);
  const db = openDatabase(source, { readonly: true });
  const tmp = tempPathNextTo(dest, 'backup');
  try {
    // VACUUM INTO accepts an existing empty file: creating it first makes it private from the start.
    closeSync(openSync(tmp, 'wx', 0o600));
    db.prepare('VACUUM INTO ?').run(tmp);
    db.close();
    const summary = publishBackupFile(tmp, dest);
    return { source, dest, bytes: statSync(dest).size, ...summary };
  } finally {
    if (db.open) db.close();
    rmSync(tmp, { force: true });
  }
}
