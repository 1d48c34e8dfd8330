import type { EventBus } from '../bus/event-bus.js';
import { nowMicros } from '../events/clock.js';
import type { Db } from './database.js';
import type { Handoff } from './handoff-queue.js';
import type { HandoffSettle } from './row-change.js';
import type { StoreWriter } from './store-writer.js';

/**
 * The owner's half of a handoff's life after it is emitted: settling it (its row deleted, its gap
 * recorded in `reported_gaps`) as a row write on the trace writer, and remembering, until that
 * commits, which handoffs are on their way so that no drain emits them twice (owner-handoffs.ts).
 */

/** What of the owner's trace context handoffs are emitted and settled through. */
export interface HandoffOwner {
  readonly db: Db;
  readonly bus: EventBus;
  readonly writer: StoreWriter;
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
  const atUs = nowMicros();
  const inFlight = inFlightOf(db);
  return new Promise((resolve) => {
    writer.writeRow({
      what: `owner_handoffs settle ${settles.map((s) => s.handoff.id).join(',')}`,
      change: { kind: 'handoff.settle', settles: settles.map((s) => settleChange(s, atUs)) },
      settled: (committed, outcome) => {
        for (const s of settles) {
          inFlight.ids.delete(s.handoff.id);
          if (s.by === 'event' && s.handoff.type === 'bus.gap_detected')
            inFlight.gaps.delete(gapKeyOf(s.handoff));
        }
        // What the committed run found: a transaction the writer ran again checked its proofs again.
        const byEvent = new Set(committed ? outcome?.settledByEvent : []);
        resolve(settles.filter((s) => byEvent.has(s.handoff.id)).map((s) => s.handoff));
      },
    });
  });
}

/** A settle as the store checks and applies it; a gap report's event records its gap as well. */
function settleChange(s: Settle, atUs: number): HandoffSettle {
  const { handoff } = s;
  if (s.by === 'discard') return { handoffId: handoff.id, by: 'discard' };
  if (s.by === 'gap')
    return {
      handoffId: handoff.id,
      by: 'gap',
      sessionId: handoff.session_id,
      gapStartId: String(handoff.payload.gap_start_id),
    };
  const p = handoff.payload;
  const gap =
    handoff.type === 'bus.gap_detected'
      ? {
          sessionId: handoff.session_id,
          gapStartId: p.gap_start_id as string,
          gapEndId: p.gap_end_id as string,
          missingCount: p.estimated_missing_count as number,
          atUs,
        }
      : null;
  return { handoffId: handoff.id, by: 'event', eventId: s.eventId, gap };
}
