import { chmodSync, existsSync, rmSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { MetisError } from '../../errors.js';
import {
  type DatabaseSummary,
  fsyncDir,
  fsyncFile,
  publishNoClobber,
  summarizeDatabase,
  tempPathNextTo,
} from '../backup.js';
import { checkedBackupCopy } from '../restore.js';
import { copyStore, redactUrl } from '../store-copy.js';

/**
 * `metis backup --store postgres://…`: the same portable single-file SQLite backup `metis backup`
 * writes of a SQLite store (so a backup restores into either backend): the store copied into a private
 * temp file next to `dest`, verified, switched to rollback-journal mode (one self-contained file),
 * fsynced, then given its name. Never overwrites `dest`.
 */
export async function backupPostgres(options: {
  readonly url: string;
  readonly dest: string;
}): Promise<DatabaseSummary & { readonly source: string; readonly dest: string; readonly bytes: number }> {
  const dest = resolve(options.dest);
  if (existsSync(dest))
    throw new MetisError('METIS_ERR_DEST_EXISTS', `${dest} already exists; a backup never overwrites a file`);
  if (!existsSync(dirname(dest)) || !statSync(dirname(dest)).isDirectory())
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `the folder ${dirname(dest)} does not exist`, {
      hint: 'Create the folder first, or choose a destination in an existing folder.',
    });
  const tmp = tempPathNextTo(dest, 'backup');
  try {
    await copyStore({ from: options.url, to: tmp, flags: { from: '--store', to: '<dest>' } });
    const copy = new Database(tmp, { fileMustExist: true });
    let summary: DatabaseSummary;
    try {
      copy.pragma('journal_mode = DELETE');
      summary = summarizeDatabase(copy);
    } finally {
      copy.close();
    }
    chmodSync(tmp, 0o600);
    fsyncFile(tmp);
    publishNoClobber(tmp, dest);
    fsyncDir(dirname(dest));
    return { source: redactUrl(options.url), dest, bytes: statSync(dest).size, ...summary };
  } finally {
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${tmp}${suffix}`, { force: true });
  }
}

/**
 * `metis restore <backup> --store postgres://…`: the refusals of a SQLite restore (not a backup, another
 * schema version, damaged, `-wal` beside it), then the backup copied into the database in one
 * transaction: a store it already holds is refused without `force` and replaced with it; any failure
 * changes nothing.
 */
export async function restorePostgres(options: {
  readonly src: string;
  readonly url: string;
  readonly force?: boolean;
}): Promise<DatabaseSummary & { readonly source: string; readonly target: string }> {
  const backup = checkedBackupCopy(options.src, options.url);
  try {
    await copyStore({
      from: backup.path,
      to: options.url,
      replace: options.force === true,
      flags: { from: options.src, to: '--store' },
    });
    return { source: resolve(options.src), target: redactUrl(options.url), ...backup.summary };
  } finally {
    backup.dispose();
  }
}
