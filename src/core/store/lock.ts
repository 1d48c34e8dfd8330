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
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  return !isZombie(pid);
}

/**
 * A killed process whose parent has not reaped it yet (in a container whose init never reaps, for
 * ever) still answers `kill(pid, 0)`, but it holds nothing: its lock is stale.
 */
function isZombie(pid: number): boolean {
  if (process.platform !== 'linux') return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

/** Who holds a database: the pid, and what that process is (`metis serve`, …; null in old lock files). */
export interface LockOwner {
  readonly pid: number;
  readonly purpose: string | null;
}

/** The live process holding the database, or null (a stale lock of a dead process is ignored). */
export function lockOwner(dbPath: string): LockOwner | null {
  try {
    const [pidLine, purposeLine] = readFileSync(lockPathFor(dbPath), 'utf8').split('\n');
    const pid = Number.parseInt((pidLine ?? '').trim(), 10);
    if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return null;
    return { pid, purpose: purposeLine?.trim() || null };
  } catch {
    return null;
  }
}

/** The pid of a live process holding the database, or null (a stale lock of a dead process is ignored). */
export function lockHolder(dbPath: string): number | null {
  return lockOwner(dbPath)?.pid ?? null;
}

/** "pid 123" or "pid 123, metis trace prune": how a refusal names the holder. */
export function describeLockOwner(owner: LockOwner): string {
  return owner.purpose === null ? `pid ${owner.pid}` : `pid ${owner.pid}, ${owner.purpose}`;
}

/**
 * Takes the database for this process, so that a second `metis serve` (or a prune, a restore) on it
 * refuses to start. The lock file holds the pid and, on its second line, `purpose` (what this process
 * is), so the refusal can say what is running.
 * @returns a function that releases the lock.
 * @throws MetisError METIS_ERR_DB_LOCKED naming the pid (and purpose) that holds it.
 */
export function acquireLock(dbPath: string, purpose?: string): () => void {
  const path = lockPathFor(dbPath);
  // The lock comes before the database, so it may be the first file of a new folder.
  ensurePrivateDir(path);
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, purpose === undefined ? `${process.pid}\n` : `${process.pid}\n${purpose}\n`);
      closeSync(fd);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        rmSync(path, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = lockOwner(dbPath);
      if (holder !== null) {
        throw new MetisError(
          'METIS_ERR_DB_LOCKED',
          `${dbPath} is in use by another metis process (${describeLockOwner(holder)})`,
        );
      }
      rmSync(path, { force: true }); // stale: its owner died without cleaning up
    }
  }
  throw new MetisError('METIS_ERR_DB_LOCKED', `could not take the lock ${path}`);
}
