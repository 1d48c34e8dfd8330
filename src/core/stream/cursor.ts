import { eventIdTime } from '../events/ids.js';
import type { StreamReads } from '../store/stream-reads.js';

const DAY_MS = 24 * 3600 * 1000;

const EXPIRED = 'The cursor is older than the retained trace. Reconnect with snapshot: true.';

/**
 * Why a cursor gets `cursor_expired` (DESIGN.md "Ids and cursors"), or null when it can be replayed:
 * it is not an event id; it is older than the retention cutoff (the configured one, or the one the last
 * prune applied); or it is older than the oldest event still kept for the session. A prune keeps audit
 * events, so the oldest kept event can be older than events it deleted: only the sweep's cutoff tells
 * that events after the cursor may be gone.
 */
export async function cursorProblem(
  reads: Pick<StreamReads, 'retention'>,
  sessionId: string,
  since: string,
  retentionDays: number,
): Promise<string | null> {
  let time: number;
  try {
    time = eventIdTime(since);
  } catch {
    return `since: ${JSON.stringify(since)} is not an event id (evt_<ULID>). Reconnect with snapshot: true.`;
  }
  if (time < Date.now() - retentionDays * DAY_MS) return EXPIRED;
  const { sweptCutoffMs: swept, oldestKept: oldest } = await reads.retention(sessionId);
  if (swept !== null && time <= swept) return EXPIRED;
  return oldest !== null && oldest.type !== 'session.created' && since < oldest.id ? EXPIRED : null;
}
