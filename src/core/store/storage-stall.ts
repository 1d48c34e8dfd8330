import { holdWriteLock } from './database.js';

/**
 * A way to make the store's commits wait for a while, from a connection of the store's own, as a
 * backup or a prune would (`POST /_conformance/stall-storage`, api/conformance-hooks.ts). While held,
 * every commit of every writer waits and reads go on; once let go, what waited commits, nothing lost.
 */
export interface StorageStall {
  /**
   * Holds the store's commits for `ms` (let go by itself after that); resolves once held, with the
   * release that lets go sooner (safe to call twice).
   */
  hold(ms: number): Promise<() => Promise<void>>;
}

/** SQLite's stall: the file's write lock, taken by a second connection (postgres/pg-storage-stall.ts: PostgreSQL's). */
export function sqliteStorageStall(dbPath: string): StorageStall {
  return {
    hold: async (ms) => {
      const release = holdWriteLock(dbPath, ms);
      return async () => release();
    },
  };
}
