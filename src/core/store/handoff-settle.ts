import type { EventBus } from '../bus/event-bus.js';
import { nowMicros } from '../events/clock.js';
import type { Db } from './database.js';
import type { Handoff } from './handoff-queue.js';
import type { TraceWriter } from './trace-writer.js';

/**
 * The owner's half of a handoff's life after it is emitted: settling it (its row deleted, its gap
 * recorded in `reported_gaps`) as a row write on the trace writer, and remembering, until that
 * commits, which handoffs are on their way so that no drain emits them twice (owner-handoffs.ts).
 */

/** What of the owner's trace context handoffs are emitted and settled through. */
export interface HandoffOwner {
  readonly db: Db;
  readonly bus: EventBus;
  readonly writer: TraceWriter;
}

/**
 * How one handoff is settled: `event` when it was emitted (settled only if that event is stored),
 * `gap` when the gap was already reported or is being reported by an earlier handoff (settled only
 * once that report is stored), `discard` for a payload the catalog rejects.
 */
export type Settle = { readonly handoff: Handoff } & (
  | { readonly by: 'event'; readonly eventId: string }
  | { readonly by: 'gap' }
  | { readonly by: 'discard' }
);

/**
 * Handoffs a drain emitted or settles whose settle has not committed yet, and the gaps they report,
 * per connection. The next drain skips them: re-emitting one made a second copy of its event when
 * the first settle was merely waiting behind another process's write lock.
 */
const IN_FLIGHT = new WeakMap<Db, { ids: Set<number>; gaps: Set<string> }>();

export function inFlightOf(db: Db): { ids: Set<number>; gaps: Set<string> } {
  let inFlight = IN_FLIGHT.get(db);
  if (inFlight === undefined) {
    inFlight = { ids: new Set(), gaps: new Set() };
    IN_FLIGHT.set(db, inFlight);
  }
  return inFlight;
}

export const gapKeyOf = (handoff: Handoff) =>
  `${handoff.session_id}\u0000${String(handoff.payload.gap_start_id)}`;

/**
 * Hands the emitted events to the writer now, then queues one row write behind them that settles
 * `settles`; resolves with the emitted handoffs it settled. Each settle checks its proof in the
 * same transaction: an event the writer dropped (buffer full during an outage) leaves its handoff
 * queued for a later drain, as does a refused settle (the writer logs it).
 */
export async function settleBehindEvents(
  context: HandoffOwner,
  settles: readonly Settle[],
): Promise<Handoff[]> {
  const { db, bus, writer } = context;
  bus.dispatchNow();
  // Inside a dispatch, dispatchNow waits for the next tick; the settle must not overtake the events.
  if (bus.queued > 0) await bus.flush();
  const stored = db.prepare('SELECT 1 FROM events WHERE id = ?').pluck();
  const reported = db
    .prepare('SELECT 1 FROM reported_gaps WHERE session_id = ? AND gap_start_id = ?')
    .pluck();
  const saveGap = db.prepare(
    'INSERT OR IGNORE INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us) ' +
      'VALUES (?, ?, ?, ?, ?)',
  );
  const remove = db.prepare('DELETE FROM owner_handoffs WHERE id = ?');
  let done: Handoff[] = [];
  const settleOne = (s: Settle): boolean => {
    if (s.by === 'event') {
      if (stored.get(s.eventId) === undefined) return false;
      const p = s.handoff.payload;
      if (s.handoff.type === 'bus.gap_detected')
        saveGap.run(
          s.handoff.session_id,
          p.gap_start_id,
          p.gap_end_id,
          p.estimated_missing_count,
          nowMicros(),
        );
    } else if (s.by === 'gap') {
      if (reported.get(s.handoff.session_id, String(s.handoff.payload.gap_start_id)) === undefined)
        return false;
    }
    remove.run(s.handoff.id);
    return true;
  };
  const inFlight = inFlightOf(db);
  return new Promise((resolve) => {
    writer.writeRow({
      what: `owner_handoffs settle ${settles.map((s) => s.handoff.id).join(',')}`,
      run: () => {
        // Run again when the writer retries the transaction: only the last run counts.
        done = settles.filter((s) => settleOne(s) && s.by === 'event').map((s) => s.handoff);
      },
      settled: (committed) => {
        for (const s of settles) {
          inFlight.ids.delete(s.handoff.id);
          if (s.by === 'event' && s.handoff.type === 'bus.gap_detected')
            inFlight.gaps.delete(gapKeyOf(s.handoff));
        }
        resolve(committed ? done : []);
      },
    });
  });
}
