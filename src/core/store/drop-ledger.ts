import type { MetisEvent } from '../events/envelope.js';

/** One run of consecutive events of a session that the trace writer dropped. */
export interface DroppedRange {
  readonly sessionId: string;
  /** The session's last event kept before the run (stored or on its way), null when the run starts it. */
  readonly before: string | null;
  readonly firstDroppedId: string;
  lastDroppedId: string;
  lastDroppedSeq: number;
  count: number;
  /** The session's first event kept after the run, once there is one. */
  after: string | null;
}

/** A range as `bus.gap_detected` describes it (bus spec §6.10) plus the dropped ids for the log. */
export interface GapReport {
  readonly session_id: string;
  /** Last persisted event before the gap; the first dropped one when nothing precedes it. */
  readonly gap_start_id: string;
  /** First persisted event after the gap; the last dropped one when nothing follows it yet. */
  readonly gap_end_id: string;
  readonly estimated_missing_count: number;
  readonly first_dropped_id: string;
  readonly last_dropped_id: string;
}

/**
 * What the trace writer dropped when its buffer overflowed, per session, so that it can be reported
 * exactly once storage is back. Events of a session reach the writer in `seq` order, so a run of drops
 * is closed by the first event kept after it.
 */
export class DropLedger {
  private readonly lastKept = new Map<string, string>();
  private readonly open = new Map<string, DroppedRange>();
  private readonly closed: DroppedRange[] = [];

  get empty(): boolean {
    return this.open.size === 0 && this.closed.length === 0;
  }

  kept(event: MetisEvent): void {
    const range = this.open.get(event.session_id);
    if (range !== undefined) {
      range.after = event.id;
      this.closed.push(range);
      this.open.delete(event.session_id);
    }
    this.lastKept.set(event.session_id, event.id);
  }

  dropped(event: MetisEvent): void {
    const range = this.open.get(event.session_id);
    if (range !== undefined && event.seq === range.lastDroppedSeq + 1) {
      range.lastDroppedId = event.id;
      range.lastDroppedSeq = event.seq;
      range.count += 1;
      return;
    }
    if (range !== undefined) this.closed.push(range);
    this.open.set(event.session_id, {
      sessionId: event.session_id,
      before: this.lastKept.get(event.session_id) ?? null,
      firstDroppedId: event.id,
      lastDroppedId: event.id,
      lastDroppedSeq: event.seq ?? Number.NaN,
      count: 1,
      after: null,
    });
  }

  /** Every range recorded so far, as gap reports; the ledger starts empty again. */
  take(): GapReport[] {
    const ranges = [...this.closed, ...this.open.values()];
    this.closed.length = 0;
    this.open.clear();
    return ranges.map((range) => ({
      session_id: range.sessionId,
      gap_start_id: range.before ?? range.firstDroppedId,
      gap_end_id: range.after ?? range.lastDroppedId,
      estimated_missing_count: range.count,
      first_dropped_id: range.firstDroppedId,
      last_dropped_id: range.lastDroppedId,
    }));
  }
}
