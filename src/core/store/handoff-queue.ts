import { nowMicros } from '../events/clock.js';
import type { Db } from './database.js';

/**
 * Events another process asks the database's owner to emit (DESIGN.md "A session has one owner").
 *
 * Only the process that owns a session stamps its ids and `seq`; a second process that stamped its own
 * (a `metis trace prune` beside a live `metis serve`) gave two events the same `seq`. So that process
 * writes what it wants said into the `owner_handoffs` table instead, and the owner emits it through its
 * own bus: the server at start-up and, while it runs, whenever another connection committed (it polls
 * `PRAGMA data_version`, which changes only then); a prune that owns the database drains it itself.
 *
 * Delivery is at least once: a handoff row is deleted only once the event it became is stored (the
 * delete is queued on the trace writer right behind the event and checks for it), so a crash in
 * between emits it again at the next start rather than losing an audit event (`trace.swept`). While
 * the process runs it is exactly once: a handoff whose settle is still on its way is not emitted again.
 *
 * Here is the queue as any process reads and writes it, with the `reported_gaps` record that keeps a
 * gap from being reported twice; the owner's side (drain, watch, settle) is owner-handoffs.ts.
 */

export type HandoffType = 'bus.gap_detected' | 'trace.swept';

export interface Handoff {
  readonly id: number;
  readonly session_id: string;
  readonly type: HandoffType;
  readonly payload: Record<string, unknown>;
}

/** Queues an event for the owner. Call it inside the transaction whose effect the event reports. */
export function handOff(
  db: Db,
  sessionId: string,
  type: HandoffType,
  payload: Record<string, unknown>,
): void {
  db.prepare(
    'INSERT INTO owner_handoffs (session_id, type, payload_json, created_at_us) VALUES (?, ?, ?, ?)',
  ).run(sessionId, type, JSON.stringify(payload), nowMicros());
}

/** Handoffs waiting for the owner, oldest first. */
export function pendingHandoffs(db: Db): Handoff[] {
  const rows = db
    .prepare('SELECT id, session_id, type, payload_json FROM owner_handoffs ORDER BY id')
    .all() as { id: number; session_id: string; type: HandoffType; payload_json: string }[];
  return rows.map((row) => ({
    id: row.id,
    session_id: row.session_id,
    type: row.type,
    payload: JSON.parse(row.payload_json) as Record<string, unknown>,
  }));
}

/** True when this gap is recorded as reported (by a scan, a drain, or the writer's live drop report). */
export function gapAlreadyReported(db: Db, sessionId: string, gapStartId: string): boolean {
  return (
    db
      .prepare('SELECT 1 FROM reported_gaps WHERE session_id = ? AND gap_start_id = ?')
      .pluck()
      .get(sessionId, gapStartId) !== undefined
  );
}

/**
 * Marks handoffs as done in one transaction of its own: their gaps become reported and their rows go.
 * For a connection without a trace writer; the owner settles through its writer (`drainHandoffs`).
 */
export function settleHandoffs(db: Db, handoffs: readonly Handoff[]): void {
  if (handoffs.length === 0) return;
  const saveGap = db.prepare(
    'INSERT OR IGNORE INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us) ' +
      'VALUES (?, ?, ?, ?, ?)',
  );
  const remove = db.prepare('DELETE FROM owner_handoffs WHERE id = ?');
  db.transaction(() => {
    for (const handoff of handoffs) {
      if (handoff.type === 'bus.gap_detected') {
        const p = handoff.payload;
        saveGap.run(handoff.session_id, p.gap_start_id, p.gap_end_id, p.estimated_missing_count, nowMicros());
      }
      remove.run(handoff.id);
    }
  }).immediate();
}
