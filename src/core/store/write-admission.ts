import type { MetisEvent } from '../events/envelope.js';
import type { DropLedger } from './drop-ledger.js';
import { eventToParams } from './event-rows.js';
import type { WriteQueue } from './write-queue.js';

/**
 * Events that end something a client waits for: past the buffer's bound they are still kept (a few per
 * turn, so the bound is exceeded by little), so that an acknowledged turn always ends for its clients
 * and in the store, with the dropped events before it reported as a gap.
 */
export const ENDINGS: ReadonlySet<string> = new Set([
  'turn.completed',
  'turn.cancelled',
  'session.ended',
  'delegate.completed',
  'delegate.failed',
]);

/** Approximate bytes of a row beside its payload JSON, for the buffer's byte bound. */
export const ROW_OVERHEAD_BYTES = 200;

/** How much may wait for storage while it is away (both writers' defaults: 100,000 events, 64 MiB). */
export interface BufferBounds {
  readonly maxEvents: number;
  readonly maxBytes: number;
}

export function bufferBounds(options: {
  maxBufferedEvents?: number;
  maxBufferedBytes?: number;
}): BufferBounds {
  return {
    maxEvents: options.maxBufferedEvents ?? 100_000,
    maxBytes: options.maxBufferedBytes ?? 64 * 1024 * 1024,
  };
}

/**
 * Queues one tick's events behind what waits, the one buffer rule of every store writer: while storage
 * is being waited out (`bounded`), an event past the bound is dropped unless it is an ending. The ledger
 * learns of each event kept or dropped, for the gap report once storage is back. Returns the dropped.
 */
export function admitEvents(
  queue: WriteQueue,
  events: readonly MetisEvent[],
  bounded: boolean,
  bounds: BufferBounds,
  ledger: DropLedger,
): MetisEvent[] {
  const dropped: MetisEvent[] = [];
  for (const event of events) {
    const params = eventToParams(event);
    const bytes = (params[9] as string).length + ROW_OVERHEAD_BYTES;
    const full = queue.events >= bounds.maxEvents || queue.bytes + bytes > bounds.maxBytes;
    if (bounded && full && !ENDINGS.has(event.type)) {
      dropped.push(event);
      ledger.dropped(event);
      continue;
    }
    ledger.kept(event);
    queue.push({ event, params, bytes });
  }
  return dropped;
}
