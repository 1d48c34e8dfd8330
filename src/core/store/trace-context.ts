import type { Logger } from 'pino';
import { EventBus } from '../bus/event-bus.js';
import type { ValidationMode } from '../bus/validation-mode.js';
import { ensureIdsAfter } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import { type Db, openDatabase } from './database.js';
import { type DetectedGap, scanForGaps } from './gap-detector.js';
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
  /** Flushes, then closes the database. Safe to call twice. */
  close(): Promise<void>;
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
  writer.attach(bus);
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
    close: async () => {
      if (closed) return;
      closed = true;
      await flush();
      db.close();
    },
  };
}

/**
 * Startup gap detection (bus spec §6.10): one `bus.gap_detected` per hole not reported before, each in
 * the affected session's stream. Returns the gaps reported.
 */
export async function reportGaps(context: TraceContext): Promise<readonly DetectedGap[]> {
  const scan = scanForGaps(context.db);
  for (const gap of scan.gaps) {
    context.bus.emit({ type: 'bus.gap_detected', session_id: gap.session_id, payload: { ...gap } });
  }
  await context.flush();
  scan.commit();
  return scan.gaps;
}
