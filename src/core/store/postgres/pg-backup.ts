import { rmSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { checkBackupDest, type DatabaseSummary, publishBackupFile, tempPathNextTo } from '../backup.js';
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
  checkBackupDest(dest);
  const tmp = tempPathNextTo(dest, 'backup');
  try {
    await copyStore({ from: options.url, to: tmp, flags: { from: '--store', to: '<dest>' } });
    const summary = publishBackupFile(tmp, dest);
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
