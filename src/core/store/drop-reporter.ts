import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { MetisEvent } from '../events/envelope.js';
import { DropLedger } from './drop-ledger.js';
import type { DroppedRunReads } from './dropped-run-reads.js';
import { type Arrival, describeDroppedRanges, emitGapReports, type ReportWriter } from './report-dropped.js';

/** A store writer as its drop report needs it. */
export interface DropReportHost extends ReportWriter {
  readonly reads: DroppedRunReads;
  bus(): EventBus | null;
  /** Storage is back and the writer may report now (not closed, not failing, nothing it must wait for). */
  ready(): boolean;
  /** Settles once the event is committed, or rejects when it was not stored. */
  whenCommitted(eventId: string): Promise<void>;
}

/**
 * What a store writer dropped during an outage, reported once storage is back (report-dropped.ts), the
 * same over a store answered at the call (SQLite) and one across the network (PostgreSQL).
 *
 * The reads are asynchronous, so a session may emit between them and the reports. The one report that
 * cares is one whose run had nothing stored after it: it names itself as the first persisted event
 * after the gap, true only if it is the session's next event. So while the reads run, the writer tells
 * the reporter the first event of each session it is handed (`handed`), and the report takes that
 * event as the gap's end instead. Reads before the writer's own queue would not do: a read answers
 * for the moment it ran, and the writer is the one place every later event of the session passes.
 */
export class DropReporter {
  readonly ledger = new DropLedger();
  /** The first event of each session handed to the writer since the running report began. */
  private arrivals: Map<string, Arrival> | null = null;
  /** The newest event the writer queued: once it is committed, so is every event before it. */
  private lastKept: string | null = null;
  private running = false;
  private again = false;

  constructor(
    private readonly host: DropReportHost,
    private readonly logger: Logger,
  ) {}

  /** The writer was handed `events` in one tick and dropped `dropped` of them. */
  handed(events: readonly MetisEvent[], dropped: readonly MetisEvent[]): void {
    // Per tick on the writer's path: nothing but the last id when no report runs and nothing was dropped.
    if (this.arrivals === null && dropped.length === 0) {
      this.lastKept = events.at(-1)?.id ?? this.lastKept;
      return;
    }
    const droppedIds = dropped.length === 0 ? null : new Set(dropped.map((event) => event.id));
    for (const event of events) {
      const kept = droppedIds === null || !droppedIds.has(event.id);
      if (kept) this.lastKept = event.id;
      if (this.arrivals !== null && !this.arrivals.has(event.session_id))
        this.arrivals.set(event.session_id, { id: event.id, kept });
    }
  }

  /** Storage came back: report what was dropped on the next turn of the loop (or after the running report). */
  recovered(): void {
    if (this.ledger.empty) return;
    if (this.running) {
      this.again = true;
      return;
    }
    setImmediate(() => void this.report());
  }

  /**
   * Reports the dropped runs from what is stored. Everything the bus holds is dispatched first and every
   * event queued before is awaited, so the store names the events around every run. Storage failing
   * again meanwhile: the runs wait in the ledger for the next recovery.
   */
  private async report(): Promise<void> {
    // Two recoveries in one turn of the loop schedule two reports: the second waits for the first.
    if (this.running) {
      this.again = true;
      return;
    }
    const bus = this.host.bus();
    if (!this.host.ready()) return;
    bus?.dispatchNow();
    if (!this.host.ready() || this.ledger.empty) return;
    this.running = true;
    this.arrivals = new Map();
    const ranges = this.ledger.take();
    try {
      if (this.lastKept !== null) await this.host.whenCommitted(this.lastKept).catch(() => undefined);
      const gaps = await describeDroppedRanges(this.host.reads, ranges);
      // From here to the last emit nothing awaits: what the bus holds reaches the writer (and `arrivals`).
      bus?.dispatchNow();
      if (!this.host.ready()) {
        this.ledger.restore(ranges);
        return;
      }
      const arrivals = this.arrivals;
      this.ledger.restore(emitGapReports(gaps, this.host, bus, this.logger, (id) => arrivals.get(id)));
    } catch (error) {
      this.ledger.restore(ranges);
      this.logger.error({ err: (error as Error).message }, 'could not report the events dropped');
    } finally {
      this.arrivals = null;
      this.running = false;
      if (this.again) {
        this.again = false;
        this.recovered();
      }
    }
  }
}
