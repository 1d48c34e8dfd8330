import type { MetisEvent } from '../events/envelope.js';

/** One run of consecutive events of a session that the trace writer dropped. */
export interface DroppedRange {
  readonly session_id: string;
  readonly first_dropped_id: string;
  readonly first_dropped_seq: number;
  last_dropped_id: string;
  last_dropped_seq: number;
  count: number;
}

/**
 * What the trace writer dropped when its buffer overflowed, per session, so that it can be reported
 * once storage is back (report-dropped.ts).
 *
 * Only the dropped runs are remembered, not the events around them: the events that bound a run are
 * named from the store at report time (bus spec §6.10 wants persisted events), and this process may
 * have stored none of them: a session resumed from an earlier run has its last event before the run
 * stored by that run. Events of a session reach the writer in `seq` order, so a run ends at the first
 * event of its session that is kept, or at a `seq` that does not follow it.
 */
export class DropLedger {
  private readonly open = new Map<string, DroppedRange>();
  private readonly closed: DroppedRange[] = [];

  get empty(): boolean {
    return this.open.size === 0 && this.closed.length === 0;
  }

  kept(event: MetisEvent): void {
    const range = this.open.get(event.session_id);
    if (range === undefined) return;
    this.closed.push(range);
    this.open.delete(event.session_id);
  }

  dropped(event: MetisEvent): void {
    const range = this.open.get(event.session_id);
    if (range !== undefined && event.seq === range.last_dropped_seq + 1) {
      range.last_dropped_id = event.id;
      range.last_dropped_seq = event.seq;
      range.count += 1;
      return;
    }
    if (range !== undefined) this.closed.push(range);
    this.open.set(event.session_id, {
      session_id: event.session_id,
      first_dropped_id: event.id,
      first_dropped_seq: event.seq ?? Number.NaN,
      last_dropped_id: event.id,
      last_dropped_seq: event.seq ?? Number.NaN,
      count: 1,
    });
  }

  /**
   * Gives back runs taken and not reported (storage failed again meanwhile): they are older than any
   * recorded since, so they go first, and a run continuing one of them is merged with it in the report.
   */
  restore(ranges: readonly DroppedRange[]): void {
    this.closed.unshift(...ranges);
  }

  /** Every run recorded so far, oldest first per session; the ledger starts empty again. */
  take(): DroppedRange[] {
    const ranges = [...this.closed, ...this.open.values()];
    this.closed.length = 0;
    this.open.clear();
    return ranges;
  }
}
