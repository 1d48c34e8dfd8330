import { closeSync, existsSync, openSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import { MetisError } from '../errors.js';
import { ensurePrivateDir } from './paths.js';
import { MIGRATIONS, SCHEMA_VERSION } from './schema.js';
import { asStorageError, storageFailureOf } from './storage-errors.js';

/**
 * busy_timeout of a connection on the server's event loop. SQLite's busy handler sleeps on the calling
 * thread, so this is the longest a write stalls the loop when another process holds the write lock;
 * the trace writer retries later with backoff instead (docs/decisions.md "Storage that never blocks").
 */
export const LOOP_BUSY_TIMEOUT_MS = 5;
/** busy_timeout of CLI commands and of start-up, where nothing else waits on the thread. */
export const DEFAULT_BUSY_TIMEOUT_MS = 5000;

export type Db = Database.Database;

export interface OpenOptions {
  /** Create the file (and its 0700 folder) when missing; otherwise a missing file is an error. */
  readonly create?: boolean;
  readonly readonly?: boolean;
  /** `FULL` survives power loss at the cost of an fsync per commit; `NORMAL` is the default (DESIGN.md). */
  readonly synchronous?: 'NORMAL' | 'FULL';
  readonly busyTimeoutMs?: number;
}

/**
 * Opens a metis database with the pragmas of DESIGN.md (WAL, synchronous=NORMAL, busy_timeout,
 * journal_size_limit, foreign keys) and brings its schema up to date.
 * @throws MetisError when the file is missing (and `create` is off), is not a metis database, or was
 * written by a newer metis.
 */
export function openDatabase(path: string, options: OpenOptions = {}): Db {
  const exists = existsSync(path);
  if (!exists && !options.create) {
    throw new MetisError('METIS_ERR_DB_NOT_FOUND', `no database at ${path}`);
  }
  if (exists && statSync(path).isDirectory()) {
    // SQLite would say "disk I/O error".
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${path} is a folder; name the database file in it`);
  }
  if (!exists) {
    try {
      ensurePrivateDir(path);
      // Created 0600 before SQLite opens it: SQLite gives the -wal and -shm files the database's mode.
      closeSync(openSync(path, 'wx', 0o600));
    } catch (error) {
      throw asStorageError(error, path);
    }
  }
  let db: Db;
  try {
    db = new Database(path, { readonly: options.readonly ?? false, fileMustExist: !options.create });
  } catch (error) {
    if (storageFailureOf(error, path) !== null) throw asStorageError(error, path);
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `cannot open ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  try {
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS}`);
    // Identify the file before any pragma that writes to it (journal_mode): a refused file is left as
    // it was. An empty file is a new database only for a caller that may create one.
    if (options.readonly) assertCurrentSchema(db, path);
    else assertMigratable(db, path, options.create === true);
    configure(db, options);
    if (!options.readonly) migrate(db);
  } catch (error) {
    db.close();
    if (error instanceof MetisError) throw error;
    const code = (error as { code?: string }).code;
    if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT') {
      throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${path} is not a SQLite database`, { cause: error });
    }
    // A full disk, another process's lock or an I/O error: say which, with the path.
    throw asStorageError(error, path);
  }
  return db;
}

function configure(db: Db, options: OpenOptions): void {
  if (!options.readonly) {
    db.pragma('journal_mode = WAL');
    db.pragma('journal_size_limit = 67108864');
  }
  db.pragma(`synchronous = ${options.synchronous ?? 'NORMAL'}`);
  db.pragma('foreign_keys = ON');
  // Rows and schemas of a file we did not write must not run SQL functions with side effects.
  db.pragma('trusted_schema = OFF');
}

function userVersion(db: Db): number {
  return db.pragma('user_version', { simple: true }) as number;
}

function hasTable(db: Db, name: string): boolean {
  return db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name) !== undefined;
}

function assertCurrentSchema(db: Db, path: string): void {
  const version = userVersion(db);
  if (version === 0 || !hasTable(db, 'events')) {
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${path} is not a metis database (no events table)`);
  }
  if (version !== SCHEMA_VERSION) {
    throw new MetisError(
      'METIS_ERR_SCHEMA_VERSION',
      `${path} has schema version ${version}; this metis reads version ${SCHEMA_VERSION}`,
    );
  }
}

/** A metis database this metis can bring up to date, or (when `mayCreate`) an empty file. */
function assertMigratable(db: Db, path: string, mayCreate: boolean): void {
  const version = userVersion(db);
  if (version === 0 && tableCount(db) > 0) {
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${path} is a SQLite database but not a metis one`);
  }
  if (version === 0 && !mayCreate) {
    throw new MetisError('METIS_ERR_NOT_A_METIS_DB', `${path} is not a metis database (it is empty)`);
  }
  if (version > SCHEMA_VERSION) {
    throw new MetisError(
      'METIS_ERR_SCHEMA_VERSION',
      `${path} has schema version ${version}, newer than this metis (version ${SCHEMA_VERSION})`,
    );
  }
}

function migrate(db: Db): void {
  const version = userVersion(db);
  for (let next = version + 1; next <= SCHEMA_VERSION; next += 1) {
    db.transaction(() => {
      const migration = MIGRATIONS[next - 1]!;
      if (typeof migration === 'string') db.exec(migration);
      else migration(db);
      db.pragma(`user_version = ${next}`);
    }).immediate();
  }
}

function tableCount(db: Db): number {
  return (db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE type = 'table'").get() as { n: number })
    .n;
}

export function schemaVersionOf(db: Db): number {
  return userVersion(db);
}

/** From here the connection serves the event loop: no write may wait long for another process's lock. */
export function serveTheLoop(db: Db): void {
  db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
}

/**
 * Takes the file's write lock from a second connection and lets it go after `ms` (the conformance
 * suite's storage stall); returns a release.
 */
export function holdWriteLock(dbPath: string, ms: number): () => void {
  const holder = new Database(dbPath);
  holder.pragma('busy_timeout = 1000');
  holder.exec('BEGIN IMMEDIATE');
  const release = () => {
    clearTimeout(timer);
    if (!holder.open) return;
    holder.exec('COMMIT');
    holder.close();
  };
  const timer = setTimeout(release, ms);
  timer.unref();
  return release;
}
