import type { SessionLister } from './session-search.js';
import type { HourCount, TraceStats } from './stats.js';
import type { UsageQuery, UsageRow } from './usage-stats.js';

/**
 * The server's reads that span every session (the session list, the usage chart, the store's figures):
 * from its own database (sqlite-whole-store-reads.ts), or from the store of record on a cluster node,
 * whose working copy holds only its sessions (postgres/pg-store-reads.ts).
 */
export interface WholeStoreReads {
  readonly sessions: SessionLister;
  readonly usage: (query: UsageQuery) => Promise<UsageRow[]>;
  /** What `metis trace stats` says of the store (without the per-session counts), and the last hours. */
  readonly storeStats: (hours: number) => Promise<Omit<TraceStats, 'by_session'> & { by_hour: HourCount[] }>;
}
