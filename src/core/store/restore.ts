import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  mkdtempSync,
  openSync,
  readSync,
  renameSync,
  rmdirSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { MetisError } from '../errors.js';
import { type DatabaseSummary, fsyncDir, summarizeDatabase, tempPathNextTo } from './backup.js';
import { acquireLock } from './lock.js';
import { ensurePrivateDir } from './paths.js';
import { SCHEMA_VERSION } from './schema.js';

export interface RestoreOptions {
  /** The backup to restore. */
  readonly src: string;
  /** The database it replaces (or creates). */
  readonly dbPath: string;
  /** Replace an existing database. */
  readonly force?: boolean;
}

export interface RestoreResult extends DatabaseSummary {
  readonly source: string;
  readonly target: string;
  readonly bytes: number;
  /** True when an existing database was replaced. */
  readonly replaced: boolean;
}

const SQLITE_MAGIC = 'SQLite format 3\0';

function refuse(message: string, hint: string): MetisError {
  return new MetisError('METIS_ERR_RESTORE_REFUSED', `${message}; nothing was changed`, { hint });
}

function readHeader(path: string): Buffer {
  const header = Buffer.alloc(100);
  const fd = openSync(path, 'r');
  try {
    readSync(fd, header, 0, 100, 0);
  } finally {
    closeSync(fd);
  }
  return header;
}

/** Cheap refusals, before anything is copied. */
function checkSource(source: string, target: string): void {
  if (!existsSync(source)) {
    throw refuse(`no backup at ${source}`, 'Pass the path of a file written by `metis backup`.');
  }
  if (!statSync(source).isFile()) {
    throw refuse(
      `${source} is a folder, not a backup file`,
      'Pass the path of a file written by `metis backup`.',
    );
  }
  if (source === target)
    throw refuse(`${source} is the database itself`, 'Pass a backup file, not the live database.');
  for (const companion of [`${source}-wal`, `${source}-shm`]) {
    if (existsSync(companion)) {
      throw refuse(
        `${companion} exists next to the backup, so it is not a clean backup (a live or hand-edited database)`,
        'Restore a file written by `metis backup`, or run `metis backup` on that database to get one.',
      );
    }
  }
  if (readHeader(source).toString('latin1', 0, 16) !== SQLITE_MAGIC) {
    throw new MetisError(
      'METIS_ERR_NOT_A_METIS_DB',
      `${source} is not a SQLite database; nothing was changed`,
      {
        hint: 'Pass the path of a file written by `metis backup`.',
      },
    );
  }
}

/**
 * Validates the copy that is about to become the database: opened read-only with trusted_schema=OFF,
 * it must be a metis database of this schema version and pass `PRAGMA integrity_check`. Checking the
 * copy (not the source) checks exactly the bytes that get installed, and never leaves SQLite's
 * `-wal`/`-shm` files next to the user's backup.
 */
function validateCopy(copyPath: string, source: string): DatabaseSummary {
  let db: Database.Database | undefined;
  try {
    db = new Database(copyPath, { readonly: true, fileMustExist: true });
    db.pragma('trusted_schema = OFF');
    const version = db.pragma('user_version', { simple: true }) as number;
    const hasEvents = db
      .prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'events'")
      .get();
    if (version === 0 || hasEvents === undefined) {
      throw new MetisError(
        'METIS_ERR_NOT_A_METIS_DB',
        `${source} is not a metis database; nothing was changed`,
        {
          hint: 'Pass the path of a file written by `metis backup`.',
        },
      );
    }
    if (version !== SCHEMA_VERSION) {
      throw new MetisError(
        'METIS_ERR_SCHEMA_VERSION',
        `${source} has schema version ${version}; this metis uses schema version ${SCHEMA_VERSION}; nothing was changed`,
        {
          hint:
            version > SCHEMA_VERSION
              ? 'Upgrade metis to the version that wrote the backup, then restore with it.'
              : 'Restore it with the metis version that wrote it; this metis migrates it when it next opens it.',
        },
      );
    }
    const problems = db.pragma('integrity_check(5)', { simple: false }) as { integrity_check: string }[];
    if (problems.length !== 1 || problems[0]?.integrity_check !== 'ok') {
      const detail = problems.map((p) => p.integrity_check).join('; ');
      throw new MetisError(
        'METIS_ERR_INTEGRITY',
        `${source} fails integrity_check (${detail}); nothing was changed`,
      );
    }
    return summarizeDatabase(db);
  } catch (error) {
    if (error instanceof MetisError) throw error;
    const code = (error as { code?: string }).code ?? '';
    if (code === 'SQLITE_CORRUPT' || code.startsWith('SQLITE_CORRUPT')) {
      throw new MetisError(
        'METIS_ERR_INTEGRITY',
        `${source} is damaged (${(error as Error).message}); nothing was changed`,
      );
    }
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `cannot read ${source}: ${(error as Error).message}`, {
      cause: error,
      hint: 'Pass the path of a file written by `metis backup`.',
    });
  } finally {
    db?.close();
    rmSync(`${copyPath}-wal`, { force: true });
    rmSync(`${copyPath}-shm`, { force: true });
  }
}

/**
 * Restore (bus §7.5): a file copy with guards. Refuses — changing nothing — a missing source, one with
 * `-wal`/`-shm` companions, one that is not a metis database of this schema version or fails
 * integrity_check, an existing target without `force`, and a target a live metis process holds.
 * The copy is written next to the target (mode 0600 from the start) and fsynced; the target's stale
 * `-wal`/`-shm` are removed (SQLite would replay them into the new file); the copy is renamed over the
 * target. The lock file is held meanwhile, so a `metis serve` cannot start on the half-done target.
 */
export function restoreDatabase(options: RestoreOptions): RestoreResult {
  const source = resolve(options.src);
  const target = resolve(options.dbPath);
  checkSource(source, target);
  const replaced = existsSync(target);
  if (replaced && !options.force) {
    throw new MetisError('METIS_ERR_DEST_EXISTS', `${target} already exists; nothing was changed`, {
      hint: 'Pass --force to replace it (run `metis backup` on it first if you may need it again).',
    });
  }
  const dir = dirname(target);
  const createdDir = !existsSync(dir);
  ensurePrivateDir(target);
  let release: (() => void) | undefined;
  const tmp = tempPathNextTo(target, 'restore');
  let done = false;
  try {
    release = acquireLock(target, 'metis restore'); // names the pid of a live holder; keeps a server from starting meanwhile
    copyPrivate(source, tmp);
    const summary = validateCopy(tmp, source);
    rmSync(`${target}-wal`, { force: true });
    rmSync(`${target}-shm`, { force: true });
    renameSync(tmp, target);
    chmodSync(target, 0o600);
    fsyncDir(dir);
    done = true;
    return { source, target, bytes: statSync(target).size, replaced, ...summary };
  } finally {
    rmSync(tmp, { force: true });
    release?.();
    if (!done && createdDir) removeEmptyDir(dir);
  }
}

/** Copies `from` into a new file created with mode 0600, so the copy is never readable by others. */
function copyPrivate(from: string, to: string): void {
  const input = openSync(from, 'r');
  try {
    const output = openSync(to, 'wx', 0o600);
    try {
      const buffer = Buffer.allocUnsafe(1 << 20);
      for (let read = readSync(input, buffer); read > 0; read = readSync(input, buffer)) {
        for (let written = 0; written < read; ) written += writeSync(output, buffer, written, read - written);
      }
      fsyncSync(output);
    } finally {
      closeSync(output);
    }
  } finally {
    closeSync(input);
  }
}

function removeEmptyDir(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // Not empty: something else put a file there meanwhile; leave it.
  }
}

/**
 * The checks `restoreDatabase` makes of a backup, for a restore into another backend: a private copy
 * of `src` (in the system's temp folder) that is a metis database of this schema version and passes
 * integrity_check, and its summary. The caller reads the copy and calls `dispose`.
 */
export function checkedBackupCopy(
  src: string,
  target: string,
): { readonly path: string; readonly summary: DatabaseSummary; dispose(): void } {
  const source = resolve(src);
  checkSource(source, target);
  const dir = mkdtempSync(join(tmpdir(), 'metis-restore-'));
  const dispose = () => rmSync(dir, { recursive: true, force: true });
  try {
    const path = join(dir, 'backup.db');
    copyPrivate(source, path);
    return { path, summary: validateCopy(path, source), dispose };
  } catch (error) {
    dispose();
    throw error;
  }
}
