import type { Logger } from 'pino';
import { withDeadline } from '../deadline.js';
import { EventValidationError } from '../errors.js';
import { gapAlreadyReported, type Handoff, pendingHandoffs } from './handoff-queue.js';
import {
  gapKeyOf,
  type HandoffOwner,
  inFlightOf,
  type Settle,
  settleBehindEvents,
} from './handoff-settle.js';

/**
 * The owner's side of the handoff queue (handoff-queue.ts): emitting what other processes queued through
 * its own bus, at start-up and whenever another connection committed, and settling each behind its event.
 */

/**
 * Emits every pending handoff through the owner's bus and queues their settle on the trace writer
 * right behind the events, so it commits in the same ordered queue, with them or just after, and is
 * retried with them while another process holds the write lock. A gap reported since it was queued
 * (twice queued, reported live, or being reported by an earlier handoff) is settled without a second
 * event, and so is a row whose payload the catalog rejects (logged). Returns the handoffs emitted
 * and settled, once their settle committed.
 */
export async function drainHandoffs(context: HandoffOwner, logger?: Logger): Promise<Handoff[]> {
  const { db, bus } = context;
  const inFlight = inFlightOf(db);
  const pending = pendingHandoffs(db).filter((handoff) => !inFlight.ids.has(handoff.id));
  if (pending.length === 0) return [];
  const settles: Settle[] = [];
  let failure: unknown = null;
  try {
    for (const handoff of pending) {
      const gap = handoff.type === 'bus.gap_detected';
      if (
        gap &&
        (inFlight.gaps.has(gapKeyOf(handoff)) ||
          gapAlreadyReported(db, handoff.session_id, String(handoff.payload.gap_start_id)))
      ) {
        settles.push({ handoff, by: 'gap' });
        inFlight.ids.add(handoff.id);
        continue;
      }
      let event: ReturnType<typeof bus.emit>;
      try {
        event = bus.emitDynamic({
          type: handoff.type,
          session_id: handoff.session_id,
          payload: handoff.payload,
        });
      } catch (error) {
        if (!(error instanceof EventValidationError)) throw error;
        event = null;
      }
      if (event !== null) {
        settles.push({ handoff, by: 'event', eventId: event.id });
        if (gap) inFlight.gaps.add(gapKeyOf(handoff));
      } else {
        // A row no payload schema accepts would be retried for ever and keep the server from starting.
        logger?.error(
          { handoff_id: handoff.id, type: handoff.type },
          'discarded an invalid handed-off event',
        );
        settles.push({ handoff, by: 'discard' });
      }
      inFlight.ids.add(handoff.id);
    }
  } catch (error) {
    failure = error; // what was emitted before it is still settled, never emitted twice
  }
  const settled = settles.length === 0 ? [] : await settleBehindEvents(context, settles);
  if (failure !== null) throw failure;
  return settled;
}

export interface HandoffWatchOptions {
  readonly logger?: Logger;
  /** How often to look at `PRAGMA data_version` (a read of shared memory, no disk access). */
  readonly intervalMs?: number;
}

const DEFAULT_WATCH_INTERVAL_MS = 200;
/** The longest the final drain may hold a close while storage is unavailable. */
const CLOSE_DRAIN_MS = 5000;

/**
 * While the owner runs: drains handoffs whenever another connection committed. The timer is unref'd
 * (it never keeps the process alive); when the trace context closes it stops, after a last drain.
 * @returns a function that stops watching and waits for a drain under way (the context's `close()`
 * calls it too).
 */
export function watchHandoffs(
  context: HandoffOwner & { onClose(hook: () => void | Promise<void>): void },
  options: HandoffWatchOptions = {},
): () => Promise<void> {
  const { db } = context;
  const dataVersion = () => db.pragma('data_version', { simple: true }) as number;
  let seen = dataVersion();
  let draining: Promise<void> | null = null;
  let stopped = false;
  const timer = setInterval(() => {
    if (draining !== null || stopped) return;
    const now = dataVersion();
    if (now === seen) return;
    // Read before draining: a handoff committed during the drain changes it again, so it is not missed.
    seen = now;
    draining = drainHandoffs(context, options.logger)
      .then(() => undefined)
      .catch((error: unknown) => {
        seen = -1; // try again on the next tick
        options.logger?.warn({ err: (error as Error).message }, 'could not emit handed-off events; retrying');
      })
      .finally(() => {
        draining = null;
      });
  }, options.intervalMs ?? DEFAULT_WATCH_INTERVAL_MS);
  timer.unref();
  const stop = async () => {
    stopped = true;
    clearInterval(timer);
    await draining; // a drain under way settles before the database closes
  };
  context.onClose(async () => {
    // What was handed over since the last tick is recorded now, not left for the next owner; but a
    // storage outage must not hold the close (whatever is not settled stays queued for the next start).
    const finalDrain = async () => {
      await stop();
      await drainHandoffs(context, options.logger);
    };
    await withDeadline(finalDrain(), CLOSE_DRAIN_MS, 'recording handed-off events at close').catch(
      (error: unknown) => {
        options.logger?.warn({ err: (error as Error).message }, 'handed-off events left for the next start');
      },
    );
  });
  return stop;
}
