import { MetisError } from '../errors.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { openDatabase } from './database.js';
import { type HandoffType, handOff } from './handoff-queue.js';
import { acquireLock, describeLockOwner, lockOwner } from './lock.js';
import { drainHandoffs } from './owner-handoffs.js';
import { openTraceContext } from './trace-context.js';

/** An event a one-shot command wants recorded in the `system` session. */
export interface SystemEvent {
  readonly type: string;
  readonly payload: Record<string, unknown>;
}

/** Who recorded the events: the running server (handed to it), or this process, owning the database. */
export type RecordedBy = { readonly by: 'server'; readonly pid: number } | { readonly by: 'self' };

const LOCK_PURPOSE = 'metis gateway';

/**
 * Records a one-shot command's events in the `system` session the way `metis trace prune` records
 * `trace.swept` (retention.ts): only the owner of a session stamps its ids and `seq`, so beside a live
 * `metis serve` they are queued in `owner_handoffs` for the server to emit with its own bus (it watches
 * for other connections' commits); with no server, this process takes the database's lock, queues them
 * and drains the queue itself. A database that does not exist yet is created.
 * @throws MetisError METIS_ERR_DB_LOCKED when another one-shot command (a prune, a restore) holds it.
 */
export async function recordSystemEvents(
  dbPath: string,
  events: readonly SystemEvent[],
): Promise<RecordedBy> {
  if (events.length === 0) return { by: 'self' };
  const owner = lockOwner(dbPath);
  if (owner !== null) {
    if (owner.purpose !== null && owner.purpose !== 'metis serve')
      throw new MetisError(
        'METIS_ERR_DB_LOCKED',
        `${dbPath} is in use by another metis process (${describeLockOwner(owner)})`,
      );
    const db = openDatabase(dbPath, { create: false });
    try {
      db.transaction(() => queue(db, events)).immediate();
    } finally {
      db.close();
    }
    return { by: 'server', pid: owner.pid };
  }
  const release = acquireLock(dbPath, LOCK_PURPOSE);
  try {
    const context = openTraceContext({ dbPath, create: true });
    try {
      context.db.transaction(() => queue(context.db, events)).immediate();
      await drainHandoffs(context);
    } finally {
      await context.close();
    }
  } finally {
    release();
  }
  return { by: 'self' };
}

function queue(db: Parameters<typeof handOff>[0], events: readonly SystemEvent[]): void {
  // The queue's emitter checks each payload against the catalog; its type names what it was built for.
  for (const event of events) handOff(db, SYSTEM_SESSION_ID, event.type as HandoffType, event.payload);
}
