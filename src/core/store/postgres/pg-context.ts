import type pg from 'pg';
import type { Logger } from 'pino';
import { EventBus } from '../../bus/event-bus.js';
import type { ValidationMode } from '../../bus/validation-mode.js';
import { MetisError } from '../../errors.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import { ensureIdsAfter } from '../../events/ids.js';
import { silentLogger } from '../../logger.js';
import { ROW_ID_BLOCK } from '../row-ids.js';
import type { RowSink } from '../session-writes.js';
import type { StoreContext } from '../store-context.js';
import { redactUrl } from '../store-copy.js';
import type { StorePort } from '../store-port.js';
import { isStoreUnreachable, storeUnavailable } from '../store-unavailable.js';
import { WriteOnlyBudgetRows, WriteOnlyQueueRows } from '../write-only-rows.js';
import { SyncReadRefused, WriteOnlySessionRows } from '../write-only-session-rows.js';
import { postgresPool } from './connect.js';
import type { LeaseTable } from './lease-table.js';
import { takeRowIdBlock, usedInRowIdBlock } from './node-registry.js';
import { pgConversationReads } from './pg-conversation-reads.js';
import { PgFamilyLoader } from './pg-load-family.js';
import { PgPatternRows } from './pg-pattern-rows.js';
import { pgQueuedSessions, pgSessionReads } from './pg-session-reads.js';
import { pgStorageStall } from './pg-storage-stall.js';
import { pgStoreReads } from './pg-store-reads.js';
import { PgStoreWriter } from './pg-store-writer.js';
import { PgStreamArchiveRows } from './pg-stream-archive-rows.js';
import { pgStreamReads } from './pg-stream-reads.js';
import { pgTraceContentReads } from './pg-trace-content-reads.js';
import { PgTraceLookups } from './pg-trace-lookups.js';
import { connectHoldingServeLock, ServeLock } from './serve-lock.js';
import { startupStoreError } from './startup-errors.js';

export interface OpenPostgresContextOptions {
  readonly url: string;
  /** The setting the URL came from, named by a start-up error (`--store`, `store.url`). */
  readonly setting: string;
  readonly logger?: Logger;
  readonly validation?: ValidationMode;
  readonly queueLimit?: number;
  /** The name the server's row-id block and commit mark are kept under (default `serve`). */
  readonly name?: string;
  /** Connections the server's reads and writes share (default 8). */
  readonly poolSize?: number;
  /** Bounds of what waits in memory while the store is away (PgStoreWriter options). */
  readonly writerBuffer?: { readonly maxEvents?: number; readonly maxBytes?: number };
  /** How long `close` waits for the store to take what is still buffered before it gives up (5 s). */
  readonly closeFlushTimeoutMs?: number;
  /**
   * A node of a cluster on this store (docs/plans/store-port.md step 9): the serve lock is held shared
   * with the other nodes, the row-id block and commit mark are kept under `nodeId` (over `name`), and
   * every commit is fenced by the leases `table` holds.
   */
  readonly lease?: { readonly nodeId: string; readonly table: LeaseTable };
}

/** The PostgreSQL context and the pool its reads and writes go through. */
export interface PostgresContext extends StoreContext {
  readonly pool: pg.Pool;
  /** The runtime's session rows: writes only (what recovery closes cut turns through). */
  readonly port: StorePort & { readonly sessions: WriteOnlySessionRows };
}

/**
 * A server's store on PostgreSQL with no working copy (docs/plans/store-port.md, step 8): events and
 * rows go to `PgStoreWriter`'s group commit, the runtime writes its rows through write-only parts and
 * reads the sessions it holds from its own memory (`runtime.open` loads a family), and every other read
 * is an asynchronous query. The serve lock keeps a second server (or a copy, restore or prune) off the
 * store while this one runs, as on SQLite; the nodes of a cluster (`lease`) hold it shared, and their
 * writes are fenced by their leases instead.
 * @throws MetisError naming `setting` when the store cannot be used (exit 2), METIS_ERR_DB_LOCKED when
 *   another server holds it.
 */
export async function openPostgresContext(options: OpenPostgresContextOptions): Promise<PostgresContext> {
  const logger = options.logger ?? silentLogger();
  const label = redactUrl(options.url);
  const lockHolder = await takeServeLock(options, label);
  const lock = new ServeLock(lockHolder, options.url, label, logger, options.lease !== undefined);
  const pool = postgresPool(options.url, 'serve', options.poolSize ?? 8);
  const wholeStore = pgStoreReads(options.url);
  try {
    return await assemble(options, { label, logger, lock, pool, wholeStore });
  } catch (error) {
    await Promise.all([pool.end().catch(() => {}), lock.close(), wholeStore.close()]);
    throw error instanceof MetisError ? error : startupStoreError(error, options.setting, label);
  }
}

async function takeServeLock(options: OpenPostgresContextOptions, label: string): Promise<pg.Client> {
  try {
    return await connectHoldingServeLock(options.url, options.setting, label, options.lease !== undefined);
  } catch (error) {
    if (error instanceof MetisError && error.code !== 'METIS_ERR_SCHEMA_VERSION') throw error;
    throw startupStoreError(error, options.setting, label);
  }
}

async function assemble(
  options: OpenPostgresContextOptions,
  parts: {
    label: string;
    logger: Logger;
    lock: ServeLock;
    pool: pg.Pool;
    wholeStore: ReturnType<typeof pgStoreReads>;
  },
): Promise<PostgresContext> {
  const { label, logger, lock, pool, wholeStore } = parts;
  const name = options.lease?.nodeId ?? options.name ?? 'serve';
  const newest = await pool.query<{ id: string | null }>('SELECT max(id) AS id FROM events');
  ensureIdsAfter(newest.rows[0]?.id ?? null);
  const block = await takeRowIdBlock(pool, name);
  let nextRowId =
    Math.max((await usedInRowIdBlock(pool, block)) ?? block * ROW_ID_BLOCK, block * ROW_ID_BLOCK) + 1;
  const writer = new PgStoreWriter({
    pool,
    label,
    logger,
    writerId: name,
    fence: options.lease?.table.fence(options.lease.nodeId),
    holdsStore: () => lock.held,
    numberSystemEvents: true,
    maxBufferedEvents: options.writerBuffer?.maxEvents,
    maxBufferedBytes: options.writerBuffer?.maxBytes,
  });
  const bus = new EventBus({
    logger,
    validation: options.validation,
    queueLimit: options.queueLimit,
    // Every session the runtime emits into is seeded first (a family's load, a new session, recovery's
    // plan); `system` is numbered by the store (several writers share it).
    lastSeq: (sessionId) => {
      if (sessionId === SYSTEM_SESSION_ID) return 0;
      throw new SyncReadRefused(`lastSeq(${sessionId})`);
    },
  });
  const writerSubscription = writer.attach(bus);
  const sink: RowSink = {
    write: (row) => writer.writeRow(row),
    nextRowId: () => {
      nextRowId += 1;
      return nextRowId - 1;
    },
  };
  const sessions = new WriteOnlySessionRows(sink);
  const port: PostgresContext['port'] = {
    sessions,
    sessionReads: pgSessionReads(pool),
    conversations: pgConversationReads(pool, sessions),
    lookups: new PgTraceLookups(pool),
    patterns: await PgPatternRows.open(pool, sink),
    budgets: new WriteOnlyBudgetRows(sink),
    queues: new WriteOnlyQueueRows(sink, await pgQueuedSessions(pool)),
    families: new PgFamilyLoader(pool),
    settled: (timeoutMs) => (writer.failure === null ? writer.idle(timeoutMs) : Promise.resolve(false)),
    whenStored: (id, timeoutMs) => writer.whenCommitted(id, timeoutMs),
  };
  const closeHooks: (() => void | Promise<void>)[] = [];
  const closeFlushTimeoutMs = options.closeFlushTimeoutMs ?? 5000;
  /** Flushes until `deadline` (one bound for the whole close); logs the loss once when it gives up. */
  let lossLogged = false;
  const flushBounded = async (deadline: number) => {
    await bus.flush();
    // idle(0) would wait without a bound.
    if (!(await writer.idle(Math.max(1, deadline - Date.now()))) && !lossLogged) {
      lossLogged = true;
      logger.error(
        { failure: writer.failure, ...writer.buffered },
        'closing the PostgreSQL store while it is unavailable: the events still waiting are lost',
      );
    }
  };
  let closing: Promise<void> | null = null;
  return {
    bus,
    port,
    writer,
    pool,
    upstream: null,
    label,
    reads: {
      // The runtime's unsettled messages and marks are kept by the rows it writes through.
      stream: () => pgStreamReads(pool, sessions),
      archiveRows: () => new PgStreamArchiveRows(pool, writer),
      traceContent: pgTraceContentReads(pool),
      wholeStore,
      // Gateway quotas on a shared store start from the shared spend (pg-gateway-spend.ts).
      gatewaySpendSince: () => [],
    },
    storageErrorOf: (error) =>
      isStoreUnreachable(error) ? storeUnavailable(label, error, 'try again once it is back') : error,
    serving: () => {},
    stall: pgStorageStall(options.url),
    flush: async () => {
      await bus.flush();
      await writer.idle();
    },
    onClose: (hook) => {
      closeHooks.push(hook);
    },
    close: () => {
      closing ??= (async () => {
        for (const hook of closeHooks) await hook();
        const deadline = Date.now() + closeFlushTimeoutMs;
        await flushBounded(deadline);
        // The writer is no longer subscribed when its own unregistration is emitted (bus §3.6).
        const unregistered = bus.unsubscribe(writerSubscription, 'shutdown');
        if (unregistered !== null) writer.write([unregistered]);
        await flushBounded(deadline);
        await writer.shutdown();
        await Promise.all([pool.end().catch(() => {}), lock.close(), wholeStore.close()]);
      })();
      return closing;
    },
  };
}
