import { microsToIso, nowMicros } from '../events/clock.js';
import type { Db } from './database.js';
import { gapAlreadyReported, handOff } from './handoff-queue.js';

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
  /** Gaps found and not reported before; each is queued for the owner as a `bus.gap_detected` handoff. */
  readonly gaps: readonly DetectedGap[];
}

interface Cursor {
  readonly seq: number;
  readonly id: string;
}

const NO_LIMIT = Number.MAX_SAFE_INTEGER;

/**
 * Finds holes in one session's `seq` (DESIGN.md invariant 4), reading only what follows that session's
 * own cursor (the last verified `seq` and its event id), in `seq` order.
 *
 * Why per session and by `seq`: rows of different processes commit out of id order, so a scan that keeps
 * one id watermark for the whole table never reads a row committed late below it and takes the next
 * row of that session for the far side of a hole. Within one session only its owner writes, and one
 * writer commits a session's events in `seq` order (the trace writer's batches wait behind a batch being
 * retried), so every `seq` below a committed one is committed or lost for good: a hole seen here is real.
 *
 * A session without a cursor starts at its first stored row: there is no event to name as the start of
 * a hole before it. A `seq` equal to the cursor's is skipped, not reported: databases written before a
 * session had one owner hold duplicate `seq` in `system`.
 */
class SessionVerifier {
  private readonly loadCursor;
  private readonly saveCursor;
  private readonly rowsAfter;
  private readonly detectedAt = microsToIso(nowMicros());

  constructor(private readonly db: Db) {
    this.loadCursor = db.prepare(
      'SELECT last_seq AS seq, last_id AS id FROM gap_scan_state WHERE session_id = ?',
    );
    this.saveCursor = db.prepare(
      'INSERT INTO gap_scan_state (session_id, last_seq, last_id) VALUES (?, ?, ?) ' +
        'ON CONFLICT (session_id) DO UPDATE SET last_seq = excluded.last_seq, last_id = excluded.last_id',
    );
    this.rowsAfter = db
      .prepare(
        'SELECT seq, id FROM events INDEXED BY idx_events_session_seq ' +
          'WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq, id',
      )
      .raw();
  }

  /**
   * Verifies `sessionId` up to `upToSeq`, advances its cursor, and queues each new gap as a handoff.
   * Call inside an IMMEDIATE transaction, so two processes never advance the same cursor at once.
   */
  verify(sessionId: string, upToSeq = NO_LIMIT): DetectedGap[] {
    const start = (this.loadCursor.get(sessionId) as Cursor | undefined) ?? null;
    if (start !== null && start.seq >= upToSeq) return [];
    let cursor = start;
    const gaps: DetectedGap[] = [];
    const rows = this.rowsAfter.iterate(sessionId, start?.seq ?? 0, upToSeq) as IterableIterator<
      [number, string]
    >;
    for (const [seq, id] of rows) {
      if (cursor !== null && seq <= cursor.seq) continue;
      if (cursor !== null && seq > cursor.seq + 1 && !gapAlreadyReported(this.db, sessionId, cursor.id)) {
        gaps.push({
          session_id: sessionId,
          gap_start_id: cursor.id,
          gap_end_id: id,
          estimated_missing_count: seq - cursor.seq - 1,
          detected_at: this.detectedAt,
        });
      }
      cursor = { seq, id };
    }
    if (cursor !== null && cursor !== start) this.saveCursor.run(sessionId, cursor.seq, cursor.id);
    for (const gap of gaps) handOff(this.db, sessionId, 'bus.gap_detected', { ...gap });
    return gaps;
  }
}

/**
 * Start-up gap detection (bus §6.10) over every session, in one IMMEDIATE transaction: cursors advance
 * and the gaps found are queued as handoffs in the same commit, so a crash can neither lose a found gap
 * nor find it twice. The owner then emits them (`drainHandoffs`).
 */
export function scanForGaps(db: Db): GapScan {
  const verifier = new SessionVerifier(db);
  const sessions = db.prepare('SELECT id FROM sessions ORDER BY id').pluck();
  const gaps = db
    .transaction(() => (sessions.all() as string[]).flatMap((sessionId) => verifier.verify(sessionId)))
    .immediate();
  return { gaps };
}

/**
 * Verifies the rows a retention sweep is about to delete: each session up to the highest `seq` the batch
 * deletes. Without it a sweep beside a live server removes rows no scan has read yet, and the next scan
 * takes the deleted stretch for a hole. Call inside the sweep's delete transaction, before the delete.
 * @param upTo highest `seq` to be deleted, per session.
 */
export function verifyBeforeDelete(db: Db, upTo: ReadonlyMap<string, number>): DetectedGap[] {
  const verifier = new SessionVerifier(db);
  return [...upTo].flatMap(([sessionId, seq]) => verifier.verify(sessionId, seq));
}
