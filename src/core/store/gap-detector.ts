import { microsToIso, nowMicros } from '../events/clock.js';
import type { Db } from './database.js';

export interface DetectedGap {
  readonly session_id: string;
  /** Last persisted event before the hole. */
  readonly gap_start_id: string;
  /** First persisted event after the hole. */
  readonly gap_end_id: string;
  /** Exact, from `seq` (the spec allows an estimate). */
  readonly estimated_missing_count: number;
  readonly detected_at: string;
}

export interface GapScan {
  /** Gaps not reported before. */
  readonly gaps: readonly DetectedGap[];
  /** Records the scan and its gaps as reported; call it after the `bus.gap_detected` events are stored. */
  commit(): void;
}

interface SessionCursor {
  seq: number;
  id: string;
}

/**
 * Finds holes in each session's `seq` (DESIGN.md invariant 4) among events stored since the last scan.
 * Only the new tail is read: the scan keeps the last verified event per session and a watermark id.
 *
 * A `seq` at or below the previous one is not a hole: process-level sessions (`system`) are written by
 * more than one process (a server and `metis trace prune`), each with its own counter, so the scan
 * re-bases there instead of reporting.
 */
export function scanForGaps(db: Db): GapScan {
  const watermark =
    (db.prepare('SELECT last_id FROM gap_scan_watermark WHERE singleton = 1').pluck().get() as
      | string
      | undefined) ?? '';
  const stateStatement = db.prepare(
    'SELECT last_seq AS seq, last_id AS id FROM gap_scan_state WHERE session_id = ?',
  );
  const alreadyReported = db
    .prepare('SELECT 1 FROM reported_gaps WHERE session_id = ? AND gap_start_id = ?')
    .pluck();
  const cursors = new Map<string, SessionCursor | null>();
  const gaps: DetectedGap[] = [];
  const detectedAt = microsToIso(nowMicros());
  let newWatermark = watermark;

  const rows = db
    .prepare('SELECT session_id, id, seq FROM events WHERE id > ? ORDER BY id')
    .raw()
    .iterate(watermark) as IterableIterator<[string, string, number]>;
  for (const [sessionId, id, seq] of rows) {
    newWatermark = id;
    let previous = cursors.get(sessionId);
    if (previous === undefined) {
      previous = (stateStatement.get(sessionId) as SessionCursor | undefined) ?? null;
    }
    if (previous !== null && seq > previous.seq + 1 && !alreadyReported.get(sessionId, previous.id)) {
      gaps.push({
        session_id: sessionId,
        gap_start_id: previous.id,
        gap_end_id: id,
        estimated_missing_count: seq - previous.seq - 1,
        detected_at: detectedAt,
      });
    }
    cursors.set(sessionId, { seq, id });
  }

  return {
    gaps,
    commit: () => {
      const saveCursor = db.prepare(
        'INSERT INTO gap_scan_state (session_id, last_seq, last_id) VALUES (?, ?, ?) ' +
          'ON CONFLICT (session_id) DO UPDATE SET last_seq = excluded.last_seq, last_id = excluded.last_id',
      );
      const saveWatermark = db.prepare(
        'INSERT INTO gap_scan_watermark (singleton, last_id) VALUES (1, ?) ' +
          'ON CONFLICT (singleton) DO UPDATE SET last_id = excluded.last_id',
      );
      const saveGap = db.prepare(
        'INSERT OR IGNORE INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us) ' +
          'VALUES (?, ?, ?, ?, ?)',
      );
      db.transaction(() => {
        for (const [sessionId, cursor] of cursors) {
          if (cursor !== null) saveCursor.run(sessionId, cursor.seq, cursor.id);
        }
        if (newWatermark !== watermark) saveWatermark.run(newWatermark);
        for (const gap of gaps) {
          saveGap.run(
            gap.session_id,
            gap.gap_start_id,
            gap.gap_end_id,
            gap.estimated_missing_count,
            nowMicros(),
          );
        }
      }).immediate();
    },
  };
}
