import type { StorageStall } from '../storage-stall.js';
import { postgresClient } from './connect.js';

/**
 * Every writer's transaction upserts its commit mark first and copies its events last
 * (pg-writer-batch.ts), so these two tables, locked in that order, hold every commit, rows-only ones
 * included, as SQLite's file lock does. The same order as the writers' takes them: a stall waiting for
 * a commit in flight lets it finish rather than deadlocking with it. EXCLUSIVE leaves reads (ACCESS
 * SHARE) free, as SQLite's WAL readers are.
 */
const LOCK_SQL = 'LOCK TABLE metis_writer_commits, events IN EXCLUSIVE MODE';

/**
 * PostgreSQL's storage stall: a connection of its own holds the tables every commit writes, in a
 * transaction left open for `ms`; writers' statements wait on the lock as SQLite's wait on the file's.
 */
export function pgStorageStall(url: string): StorageStall {
  return {
    hold: async (ms) => {
      const client = postgresClient(url, 'serve');
      await client.connect();
      try {
        await client.query('BEGIN');
        await client.query(LOCK_SQL);
      } catch (error) {
        await client.end().catch(() => {});
        throw error;
      }
      let released: Promise<void> | null = null;
      const release = (): Promise<void> => {
        clearTimeout(timer);
        released ??= client
          .query('COMMIT')
          .then(
            () => {},
            () => {},
          )
          .finally(() => client.end().catch(() => {}));
        return released;
      };
      const timer = setTimeout(() => void release(), ms);
      timer.unref();
      return release;
    },
  };
}
