import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import { newEventId } from '../events/ids.js';
import type { RowWrite } from './batch-committer.js';
import type { DroppedRange } from './drop-ledger.js';
import type { DroppedRunReads } from './dropped-run-reads.js';

/** The store writer as a report needs it: its queue behind the events. */
export interface ReportWriter {
  writeRow(row: RowWrite): void;
}

/** A dropped run as `bus.gap_detected` describes it (bus spec §6.10), plus the dropped ids for the log. */
export interface GapReport {
  readonly session_id: string;
  /** Last persisted event before the gap; the first dropped one when the session has none stored before it. */
  readonly gap_start_id: string;
  /** First persisted event after the gap: the report itself when nothing after it was stored first. */
  readonly gap_end_id: string;
  readonly estimated_missing_count: number;
  readonly first_dropped_id: string;
  readonly last_dropped_id: string;
}

/** A hole to report: its description, the runs it covers, and whether the store holds its report already. */
export interface DescribedGap {
  /** `gap_end_id` is empty when nothing of the session was stored after the run at the read. */
  readonly report: GapReport;
  readonly ranges: readonly DroppedRange[];
  readonly reported: boolean;
}

/**
 * Names each dropped run by the persisted events around it, read from the store, exactly as the
 * startup scan (gap-detector.ts) will name the same `seq` hole: the scan keys `reported_gaps` by
 * (session, last persisted event before the hole), so any other start id makes it report the hole a
 * second time. Call once storage is back and everything kept before the ranges were taken is committed.
 *
 * Runs of one session with no persisted event between them are one hole to the scan, so they become
 * one report. A run the session has no persisted event before is never reported by the scan (a
 * session without a cursor starts at its first stored row), so its report names the first dropped
 * event, the only id there is.
 */
export async function describeDroppedRanges(
  reads: DroppedRunReads,
  ranges: readonly DroppedRange[],
): Promise<DescribedGap[]> {
  const gaps = new Map<string, { report: GapReport; ranges: DroppedRange[] }>();
  for (const range of ranges) {
    const { before, after } = await reads.bounds(
      range.session_id,
      range.first_dropped_seq,
      range.last_dropped_seq,
    );
    const gapStart = before ?? range.first_dropped_id;
    const key = `${range.session_id}\u0000${gapStart}`;
    const merged = gaps.get(key);
    gaps.set(key, {
      report: {
        session_id: range.session_id,
        gap_start_id: gapStart,
        gap_end_id: after ?? '',
        estimated_missing_count: range.count + (merged?.report.estimated_missing_count ?? 0),
        first_dropped_id: merged?.report.first_dropped_id ?? range.first_dropped_id,
        last_dropped_id: range.last_dropped_id,
      },
      ranges: [...(merged?.ranges ?? []), range],
    });
  }
  const described: DescribedGap[] = [];
  for (const gap of gaps.values())
    described.push({
      ...gap,
      reported: await reads.reported(gap.report.session_id, gap.report.gap_start_id),
    });
  return described;
}

/** The first event of a session handed to the writer since the report's reads began, and its fate. */
export interface Arrival {
  readonly id: string;
  /** Queued to be stored (false: dropped past the buffer's bound, storage failing again). */
  readonly kept: boolean;
}

/**
 * Reports what the writer dropped during an outage, once storage is back: one `bus.gap_detected` per
 * hole, in the affected session (bus spec §6.10), and a `reported_gaps` row so that the startup scan,
 * which finds the same `seq` hole, does not report it a second time. A hole the scan reported first (a
 * retention sweep verifies rows before it deletes them) is not reported again.
 *
 * Synchronous from here to the last emit: the reads came before, and `firstArrival` says what of each
 * session reached the writer since they began. Returns the runs left for the next recovery.
 */
export function emitGapReports(
  gaps: readonly DescribedGap[],
  writer: ReportWriter,
  bus: EventBus | null,
  logger: Logger,
  firstArrival: (sessionId: string) => Arrival | undefined,
): DroppedRange[] {
  const detectedAt = microsToIso(nowMicros());
  const left: DroppedRange[] = [];
  // A report with nothing stored after its run names itself, so it must be the first of its session
  // emitted now (at most one run per session is still open).
  const ordered = [
    ...gaps.filter((g) => g.report.gap_end_id === ''),
    ...gaps.filter((g) => g.report.gap_end_id !== ''),
  ];
  for (const { report: described, ranges, reported } of ordered) {
    let after = described.gap_end_id;
    if (after === '') {
      // Emitted since the read: the session's first such event is the first persisted after the run,
      // or, dropped, continues the hole, which the next recovery reports whole.
      const arrival = firstArrival(described.session_id);
      if (arrival?.kept === false) {
        left.push(...ranges);
        continue;
      }
      after = arrival?.id ?? '';
    }
    // Nothing of the session was stored or queued after the run, and the bus has dispatched everything
    // emitted so far: the report is the session's next event, so it is the first persisted one after the gap.
    const selfId = after === '' && bus !== null ? newEventId() : null;
    const report = { ...described, gap_end_id: selfId ?? (after || described.last_dropped_id) };
    logger.error({ ...report }, 'events dropped while storage was unavailable; reporting the gap');
    if (bus === null || reported) continue;
    try {
      bus.emit({
        type: 'bus.gap_detected',
        session_id: report.session_id,
        presetId: selfId ?? undefined,
        payload: {
          session_id: report.session_id,
          gap_start_id: report.gap_start_id,
          gap_end_id: report.gap_end_id,
          estimated_missing_count: report.estimated_missing_count,
          detected_at: detectedAt,
        },
      });
    } catch (error) {
      logger.error({ err: (error as Error).message, ...report }, 'could not emit bus.gap_detected');
      continue;
    }
    // The event goes to the writer's queue now, so the row below commits with or after it.
    bus.dispatchNow();
    writer.writeRow({
      what: `reported_gaps ${report.session_id} ${report.gap_start_id}`,
      change: {
        kind: 'gap.reported',
        sessionId: report.session_id,
        gapStartId: report.gap_start_id,
        gapEndId: report.gap_end_id,
        missingCount: report.estimated_missing_count,
        atUs: nowMicros(),
      },
    });
  }
  return left;
}
