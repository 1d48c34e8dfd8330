import type { Logger } from 'pino';
import { EventBus } from '../bus/event-bus.js';
import type { ValidationMode } from '../bus/validation-mode.js';
import { ensureIdsAfter } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import { type Db, openDatabase } from './database.js';
import { type DetectedGap, scanForGaps } from './gap-detector.js';
import { drainHandoffs } from './owner-handoffs.js';
import { TraceStore } from './trace-store.js';
import { TraceWriter } from './trace-writer.js';

export interface TraceContext {
  readonly db: Db;
  readonly bus: EventBus;
  readonly store: TraceStore;
  readonly writer: TraceWriter;
  readonly dbPath: string;
  /** Waits until every emitted event is dispatched and committed. */
  flush(): Promise<void>;
  /**
   * Runs the close hooks, flushes, records the trace writer's `bus.subscriber_unregistered` (reason
   * `shutdown`), then closes the database. Safe to call twice.
   */
  close(): Promise<void>;
  /** Runs `hook` at the start of `close()`, before the final flush (e.g. to stop a timer that emits). */
  onClose(hook: () => void | Promise<void>): void;
}

export interface OpenTraceContextOptions {
  readonly dbPath: string;
  readonly create?: boolean;
  readonly logger?: Logger;
  readonly validation?: ValidationMode;
  readonly queueLimit?: number;
  readonly synchronous?: 'NORMAL' | 'FULL';
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
  });
  const store = new TraceStore(db);
  ensureIdsAfter(store.lastEventId());
  const bus = new EventBus({
    logger,
    validation: options.validation,
    queueLimit: options.queueLimit,
    lastSeq: (sessionId) => store.lastSeq(sessionId),
  });
  const writer = new TraceWriter(db, { logger });
  const writerSubscription = writer.attach(bus);
  const closeHooks: (() => void | Promise<void>)[] = [];
  let closed = false;
  const flush = async () => {
    await bus.flush();
    await writer.idle();
  };
  return {
    db,
    bus,
    store,
    writer,
    dbPath: options.dbPath,
    flush,
    onClose: (hook) => {
      closeHooks.push(hook);
    },
    close: async () => {
      if (closed) return;
      closed = true;
      for (const hook of closeHooks) await hook();
      await flush();
      // The writer is no longer subscribed when its own unregistration is emitted (bus §3.6), so it is
      // handed that event directly: every process records both ends of the writer's life.
      const unregistered = bus.unsubscribe(writerSubscription, 'shutdown');
      if (unregistered !== null) writer.write([unregistered]);
      await flush();
      db.close();
    },
  };
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
