import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import { newEventId } from '../events/ids.js';
import type { RowWrite } from './batch-committer.js';
import type { Db } from './database.js';
import type { DroppedRange } from './drop-ledger.js';
import { gapAlreadyReported } from './handoff-queue.js';

/** The trace writer as a report needs it: its database, and its queue behind the events. */
export interface ReportWriter {
  readonly db: Db;
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

/**
 * Names each dropped run by the persisted events around it, read from the store, exactly as the
 * startup scan (gap-detector.ts) will name the same `seq` hole: the scan keys `reported_gaps` by
 * (session, last persisted event before the hole), so any other start id makes it report the hole a
 * second time. Call once storage is back and everything kept before now is committed.
 *
 * Runs of one session with no persisted event between them are one hole to the scan, so they become
 * one report. A run the session has no persisted event before is never reported by the scan (a
 * session without a cursor starts at its first stored row), so its report names the first dropped
 * event, the only id there is.
 */
export function describeDroppedRanges(db: Db, ranges: readonly DroppedRange[]): GapReport[] {
  // Ties in `seq` (old databases, `system`): the scan keeps the lowest id of a `seq`, so these do too.
  const before = db
    .prepare('SELECT id FROM events WHERE session_id = ? AND seq < ? ORDER BY seq DESC, id LIMIT 1')
    .pluck();
  const after = db
    .prepare('SELECT id FROM events WHERE session_id = ? AND seq > ? ORDER BY seq, id LIMIT 1')
    .pluck();
  const reports = new Map<string, GapReport>();
  for (const range of ranges) {
    const start = (before.get(range.session_id, range.first_dropped_seq) as string | undefined) ?? null;
    const end = (after.get(range.session_id, range.last_dropped_seq) as string | undefined) ?? null;
    const gapStart = start ?? range.first_dropped_id;
    const key = `${range.session_id}\u0000${gapStart}`;
    const merged = reports.get(key);
    reports.set(key, {
      session_id: range.session_id,
      gap_start_id: gapStart,
      // Empty until the report is emitted: then the report itself is the first event stored after the run.
      gap_end_id: end ?? '',
      estimated_missing_count: range.count + (merged?.estimated_missing_count ?? 0),
      first_dropped_id: merged?.first_dropped_id ?? range.first_dropped_id,
      last_dropped_id: range.last_dropped_id,
    });
  }
  return [...reports.values()];
}

/**
 * Reports what the trace writer dropped during an outage, once storage is back: one `bus.gap_detected`
 * per hole, in the affected session (bus spec §6.10), and a `reported_gaps` row so that the startup
 * scan, which finds the same `seq` hole, does not report it a second time. A hole the scan reported
 * first (a retention sweep verifies rows before it deletes them) is not reported again.
 */
export function reportDroppedRanges(
  ranges: readonly DroppedRange[],
  writer: ReportWriter,
  bus: EventBus | null,
  logger: Logger,
): void {
  const detectedAt = microsToIso(nowMicros());
  const all = describeDroppedRanges(writer.db, ranges);
  // A report with nothing stored after its run names itself, so it must be the first of its session
  // emitted now (at most one run per session is still open).
  const ordered = [...all.filter((r) => r.gap_end_id === ''), ...all.filter((r) => r.gap_end_id !== '')];
  for (const described of ordered) {
    // Nothing of the session was stored after the run, and the bus has dispatched everything emitted
    // so far: the report is the session's next event, so it is the first persisted one after the gap.
    const selfId = described.gap_end_id === '' && bus !== null ? newEventId() : null;
    const report = {
      ...described,
      gap_end_id: selfId ?? (described.gap_end_id || described.last_dropped_id),
    };
    logger.error({ ...report }, 'events dropped while storage was unavailable; reporting the gap');
    if (bus === null) continue;
    if (gapAlreadyReported(writer.db, report.session_id, report.gap_start_id)) continue;
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
}
