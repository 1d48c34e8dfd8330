import { eventIdTime } from '../events/ids.js';
import type { TraceStore } from '../store/trace-store.js';

const DAY_MS = 24 * 3600 * 1000;

/**
 * `cursor_expired` (DESIGN.md "Ids and cursors"): the cursor is older than the retention cutoff (the
 * configured one, or the one the last prune applied), or older than the oldest event still kept for
 * the session. A prune keeps audit events, so the oldest kept event can be older than events it
 * deleted: only the sweep's cutoff tells that events after the cursor may be gone.
 */
export function cursorExpired(
  store: TraceStore,
  sessionId: string,
  since: string,
  retentionDays: number,
): boolean {
  let time: number;
  try {
    time = eventIdTime(since);
  } catch {
    return true; // not an id metis issued: nothing can be replayed after it
  }
  if (time < Date.now() - retentionDays * DAY_MS) return true;
  const swept = store.lastSweepCutoffMs();
  if (swept !== null && time <= swept) return true;
  const oldest = store.getOldestKept(sessionId);
  return oldest !== null && oldest.type !== 'session.created' && since < oldest.id;
}
