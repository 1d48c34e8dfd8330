import type { Logger } from 'pino';
import { EventBus } from '../bus/event-bus.js';
import type { ValidationMode } from '../bus/validation-mode.js';
import { ensureIdsAfter } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import { type Db, openDatabase, serveTheLoop } from './database.js';
import { type DetectedGap, scanForGaps } from './gap-detector.js';
import { gatewaySpendSince } from './gateway-spend.js';
import { drainHandoffs } from './owner-handoffs.js';
import { sqliteWholeStoreReads } from './sqlite-whole-store-reads.js';
import { asStorageError } from './storage-errors.js';
import { sqliteStorageStall } from './storage-stall.js';
import type { StoreContext } from './store-context.js';
import { sqliteStorePort } from './store-port.js';
import { storageErrorOf } from './store-unavailable.js';
import type { StoreUpstream } from './store-upstream.js';
import { SqliteStreamArchiveRows } from './stream-archive-rows.js';
import { sqliteStreamReads } from './stream-reads.js';
import { sqliteTraceContentReads } from './trace-content-rows.js';
import { TraceStore } from './trace-store.js';
import { TraceWriter } from './trace-writer.js';

/**
 * The SQLite store a server runs on (the embedded store, or the working copy of a PostgreSQL store):
 * a StoreContext whose file the commands and the working copy's machinery also reach directly.
 * `close()` records the trace writer's `bus.subscriber_unregistered` (reason `shutdown`) before it closes
 * the database; while storage stays unavailable it waits at most `closeFlushTimeoutMs` for each flush,
 * then logs what is lost and closes anyway.
 */
export interface TraceContext extends StoreContext {
  readonly db: Db;
  readonly store: TraceStore;
  readonly dbPath: string;
}

export interface OpenTraceContextOptions {
  readonly dbPath: string;
  readonly create?: boolean;
  readonly logger?: Logger;
  readonly validation?: ValidationMode;
  readonly queueLimit?: number;
  readonly synchronous?: 'NORMAL' | 'FULL';
  /** busy_timeout of the connection (default DEFAULT_BUSY_TIMEOUT_MS; a server lowers it once it listens). */
  readonly busyTimeoutMs?: number;
  /** Bounds of what waits in memory while storage is unavailable (TraceWriter options). */
  readonly writerBuffer?: { readonly maxEvents?: number; readonly maxBytes?: number };
  /** How long `close` waits for storage to take what is still buffered before it gives up (default 5 s). */
  readonly closeFlushTimeoutMs?: number;
  /** Makes the database a working copy of this store of record. */
  readonly upstream?: (db: Db) => StoreUpstream;
}

/**
 * Opens a database and wires the bus to it: ids continue after the newest stored one, each session's
 * `seq` continues after its last stored event, and the trace writer subscribes to everything.
 */
export function openTraceContext(options: OpenTraceContextOptions): TraceContext {
  const logger = options.logger ?? silentLogger();
  const db = openDatabase(options.dbPath, {
    create: options.create ?? true,
    synchronous: options.synchronous,
    busyTimeoutMs: options.busyTimeoutMs,
  });
  try {
    probeWrite(db);
  } catch (error) {
    db.close();
    throw asStorageError(error, options.dbPath);
  }
  const store = new TraceStore(db);
  ensureIdsAfter(store.lastEventId());
  const bus = new EventBus({
    logger,
    validation: options.validation,
    queueLimit: options.queueLimit,
    lastSeq: (sessionId) => store.lastSeq(sessionId),
  });
  const writer = new TraceWriter(db, {
    logger,
    path: options.dbPath,
    maxBufferedEvents: options.writerBuffer?.maxEvents,
    maxBufferedBytes: options.writerBuffer?.maxBytes,
  });
  const writerSubscription = writer.attach(bus);
  const port = sqliteStorePort(db, store.lookups);
  const upstream = options.upstream?.(db) ?? null;
  if (upstream !== null) {
    writer.onBatch(() => upstream.kick());
    upstream.start();
  }
  const wholeStore = sqliteWholeStoreReads({ db, dbPath: options.dbPath });
  const closeHooks: (() => void | Promise<void>)[] = [];
  let closed = false;
  const flush = async () => {
    await bus.flush();
    await writer.idle();
  };
  const flushBounded = async () => {
    await bus.flush();
    const done = await writer.idle(options.closeFlushTimeoutMs ?? 5000);
    if (!done) {
      logger.error(
        { failure: writer.failure, ...writer.buffered },
        'closing the trace store while storage is unavailable: the events still waiting are lost',
      );
    }
  };
  return {
    db,
    upstream,
    bus,
    store,
    port,
    writer,
    dbPath: options.dbPath,
    label: options.dbPath,
    reads: {
      stream: (sessions) => sqliteStreamReads(store, sessions),
      archiveRows: () => new SqliteStreamArchiveRows(db),
      traceContent: sqliteTraceContentReads(store),
      wholeStore,
      gatewaySpendSince: (sinceUs) => gatewaySpendSince(db, sinceUs),
    },
    storageErrorOf: (error) => storageErrorOf({ upstream, dbPath: options.dbPath }, error),
    serving: () => serveTheLoop(db),
    stall: sqliteStorageStall(options.dbPath),
    flush,
    onClose: (hook) => {
      closeHooks.push(hook);
    },
    close: async () => {
      if (closed) return;
      closed = true;
      for (const hook of closeHooks) await hook();
      await flushBounded();
      // The writer is no longer subscribed when its own unregistration is emitted (bus §3.6), so it is
      // handed that event directly: every process records both ends of the writer's life.
      const unregistered = bus.unsubscribe(writerSubscription, 'shutdown');
      if (unregistered !== null) writer.write([unregistered]);
      await flushBounded();
      await upstream?.close(options.closeFlushTimeoutMs ?? 5000);
      writer.close();
      db.close();
    },
  };
}

/**
 * One small write transaction at open (the busy timeout still the long start-up one), so that a full
 * disk or a lock held by another process is a clear start-up error rather than a server that starts and
 * cannot store its first event.
 */
function probeWrite(db: Db): void {
  db.transaction(() => {
    db.prepare("UPDATE sessions SET updated_at_us = updated_at_us WHERE id = 'system'").run();
  }).immediate();
}

/**
 * Start-up gap detection (bus spec §6.10) by the database's owner: scans every session from its cursor,
 * then emits what is handed off (the gaps just found, and whatever a prune left for the owner), one
 * `bus.gap_detected` per hole not reported before, each in the affected session's stream.
 * Returns the gaps reported.
 */
export async function reportGaps(context: TraceContext): Promise<readonly DetectedGap[]> {
  scanForGaps(context.db);
  const emitted = await drainHandoffs(context);
  return emitted
    .filter((handoff) => handoff.type === 'bus.gap_detected')
    .map((handoff) => handoff.payload as unknown as DetectedGap);
}
