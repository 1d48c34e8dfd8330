import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { onTestFinished } from 'vitest';

const DRIVER = createRequire(import.meta.url).resolve('better-sqlite3');

/**
 * A real second process that opens the database with better-sqlite3, takes the write lock with
 * `BEGIN IMMEDIATE`, and holds it until released (or `holdMs` passed), then commits and exits.
 */
const SCRIPT = `
const Database = require(process.argv[1]);
const db = new Database(process.argv[2]);
db.pragma('busy_timeout = 10000');
db.exec('BEGIN IMMEDIATE');
db.prepare("UPDATE sessions SET updated_at_us = updated_at_us WHERE id = 'system'").run();
process.stdout.write('locked\\n');
const release = () => { db.exec('COMMIT'); db.close(); process.stdout.write('released\\n'); process.exit(0); };
setTimeout(release, Number(process.argv[3]));
process.stdin.on('data', release);
`;

export interface LockHolder {
  readonly child: ChildProcess;
  /** Commits and ends the holder now; resolves once it exited. */
  release(): Promise<void>;
  /** Resolves once the holder let go (by itself after `holdMs`, or through `release`). */
  readonly released: Promise<void>;
}

/** Starts the holder and resolves once it holds the lock. Killed at the end of the test if still alive. */
export async function holdWriteLockInChild(dbPath: string, holdMs: number): Promise<LockHolder> {
  const child = spawn(process.execPath, ['-e', SCRIPT, DRIVER, dbPath, String(holdMs)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('locked')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`lock holder exited ${code} before locking`)));
  });
  return {
    child,
    released: exited,
    release: async () => {
      if (child.exitCode === null) child.stdin!.write('go\n');
      await exited;
    },
  };
}
