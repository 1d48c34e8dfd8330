import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import type { GapReport } from './drop-ledger.js';
import type { TraceWriter } from './trace-writer.js';

/**
 * Reports what the trace writer dropped during an outage, once storage is back: one `bus.gap_detected`
 * per dropped run, in the affected session (bus spec §6.10), and a `reported_gaps` row so that the
 * startup scan, which finds the same `seq` hole, does not report it a second time. The row is keyed
 * like the scan's own reports: the session and the last persisted event before the hole.
 */
export function reportDroppedRanges(
  reports: readonly GapReport[],
  writer: TraceWriter,
  bus: EventBus | null,
  logger: Logger,
): void {
  const detectedAt = microsToIso(nowMicros());
  for (const report of reports) {
    logger.error({ ...report }, 'events dropped while storage was unavailable; reporting the gap');
    if (bus === null) continue;
    try {
      bus.emit({
        type: 'bus.gap_detected',
        session_id: report.session_id,
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
      run: () =>
        writer.db
          .prepare(
            `INSERT OR IGNORE INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us)
             VALUES (?, ?, ?, ?, ?)`,
          )
          .run(
            report.session_id,
            report.gap_start_id,
            report.gap_end_id,
            report.estimated_missing_count,
            nowMicros(),
          ),
    });
  }
}
