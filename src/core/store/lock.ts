import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { MetisError } from '../errors.js';
import { ensurePrivateDir } from './paths.js';

/** The lock file that says a server owns a database: `<db>.lock` holding the owner's pid. */
export function lockPathFor(dbPath: string): string {
  return `${dbPath}.lock`;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The pid of a live process holding the database, or null (a stale lock of a dead process is ignored). */
export function lockHolder(dbPath: string): number | null {
  try {
    const pid = Number.parseInt(readFileSync(lockPathFor(dbPath), 'utf8').trim(), 10);
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : null;
  } catch {
    return null;
  }
}

/**
 * Takes the database for this process, so that a second `metis serve` on it refuses to start.
 * @returns a function that releases the lock.
 * @throws MetisError METIS_ERR_DB_LOCKED naming the pid that holds it.
 */
export function acquireLock(dbPath: string): () => void {
  const path = lockPathFor(dbPath);
  // The lock comes before the database, so it may be the first file of a new folder.
  ensurePrivateDir(path);
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        rmSync(path, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = lockHolder(dbPath);
      if (holder !== null) {
        throw new MetisError(
          'METIS_ERR_DB_LOCKED',
          `${dbPath} is in use by another metis process (pid ${holder})`,
        );
      }
      rmSync(path, { force: true }); // stale: its owner died without cleaning up
    }
  }
  throw new MetisError('METIS_ERR_DB_LOCKED', `could not take the lock ${path}`);
}
