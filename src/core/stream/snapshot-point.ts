import type { Runtime } from '../runtime/runtime.js';
import type { StreamReads } from '../store/stream-reads.js';
import type { FaultSwitches } from './faults.js';
import type { RecentStreams } from './recent-streams.js';
import { pendingConfirmations } from './snapshot.js';

/** Enough for a message and a question behind it; the point settles in one or two steps. */
const MAX_STEPS = 8;

export interface SnapshotPointInput {
  readonly runtime: Runtime;
  readonly reads: Pick<
    StreamReads,
    'eventBefore' | 'confirmationEventsThrough' | 'unansweredConfirmations' | 'lineage'
  >;
  readonly recent: RecentStreams;
  /** The attached session. */
  readonly sessionId: string;
  /** The sessions the stream carries (the attached one, and its workers when the filter asks). */
  readonly sessionIds: ReadonlySet<string>;
  /** The newest event released to clients: no snapshot may be newer. */
  readonly released: string | null;
  readonly faults: FaultSwitches;
}

/**
 * The `snapshot_at_event_id` of a snapshot taken now (docs/decisions.md "Snapshot point").
 *
 * A snapshot shows what the events up to its id did, and everything after it arrives as events. A
 * spec-only client cannot render a message whose start it never saw, nor answer a question it was
 * never asked, so the point steps back to just before anything still in progress: the model call
 * (`llm.call_started`, the parent of `message.start`) of a message still streaming, the
 * `tool.confirmation_requested` of a question still pending. Those then
 * reach the client as ordinary events after the snapshot, ids increasing (issue 14 obs. 2 and 4).
 */
export async function snapshotPoint(input: SnapshotPointInput): Promise<string | null> {
  const { runtime, reads, recent, sessionId, sessionIds, faults } = input;
  // The snapshot-live-state fault: the last released event, as before issue 14.
  if (faults.snapshotLiveState) return input.released;
  let point = input.released;
  for (let step = 0; point !== null && step < MAX_STEPS; step += 1) {
    const at: string = point;
    let earliest: string | null = null;
    const consider = (id: string) => {
      if (id <= at && (earliest === null || id < earliest)) earliest = id;
    };
    if (!faults.snapshotHidesPartial) {
      for (const id of sessionIds) {
        // From its model call on: a client sees `llm.call_started` before the message (bus §5.3).
        const first = recent.inFlight(id)[0];
        if (first !== undefined) consider(first.parent_event_id ?? first.id);
      }
    }
    const questionSessions = new Set(sessionIds);
    if (!faults.snapshotHidesConfirmation) {
      for (const pending of await pendingConfirmations(runtime, reads, sessionId, at)) {
        consider(pending.requested_event_id);
        questionSessions.add(pending.session_id);
      }
    }
    if (earliest === null) return at;
    const before = await eventBefore(reads, recent, [...questionSessions], earliest);
    // Nothing before it (cannot happen: `session.created` comes first): keep the point, and with it the
    // additive fields that describe what is in progress.
    if (before === null || before >= at) return at;
    point = before;
  }
  return point;
}

/** The newest event of these sessions, stored or streamed, before `beforeId`. */
async function eventBefore(
  reads: Pick<StreamReads, 'eventBefore'>,
  recent: RecentStreams,
  sessionIds: readonly string[],
  beforeId: string,
): Promise<string | null> {
  let newest = await reads.eventBefore(sessionIds, beforeId);
  for (const event of recent.inMemoryAfter(new Set(sessionIds), newest)) {
    if (event.id >= beforeId) break;
    newest = event.id;
  }
  return newest;
}
