import type { Db } from './database.js';
import { searchSessions, sessionListRow } from './session-search.js';
import { eventsPerHour, traceStats } from './stats.js';
import { usageByBucket } from './usage-stats.js';
import type { WholeStoreReads } from './whole-store-reads.js';

/** The reads that span every session, from the server's own SQLite database (postgres/pg-store-reads.ts: the store of record's). */
export function sqliteWholeStoreReads(trace: { readonly db: Db; readonly dbPath: string }): WholeStoreReads {
  return {
    sessions: {
      search: async (search) => searchSessions(trace.db, search),
      row: async (sessionId) => sessionListRow(trace.db, sessionId),
    },
    usage: async (query) => usageByBucket(trace.db, query),
    storeStats: async (hours) => {
      const { by_session: _, ...stats } = traceStats(trace.dbPath);
      return { ...stats, by_hour: eventsPerHour(trace.db, hours) };
    },
  };
}
