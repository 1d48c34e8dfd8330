import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

const CHILD = join(import.meta.dirname, '../fixtures/pg-transaction-child.ts');
const server = postgresForFile();

/**
 * A connection checked out of a pool has no error listener of the pool's: an error the server sends
 * while no query runs on it (a restart between two statements of a transaction) was thrown from the
 * socket's event and ended the process (seen as an uncaught "terminating connection due to
 * administrator command" in CI, during a database restart under a running server).
 */
describe.skipIf(!postgresTestsRun)('a PostgreSQL connection lost in a transaction', () => {
  it('fails the transaction, and the process lives on', async () => {
    const url = freshDatabase(server);
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, url], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => {
      out += String(chunk);
    });
    child.stderr.on('data', (chunk) => {
      err += String(chunk);
    });
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect({ code, err: err.slice(0, 500) }).toEqual({ code: 0, err: '' });
    expect(out).toMatch(/^rejected: .+\nalive\n$/);
  }, 30_000);
});
