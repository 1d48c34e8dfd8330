import type { Db } from './database.js';
import { gapAlreadyReported } from './handoff-queue.js';

/** The persisted events around a dropped run of a session, by `seq`; null where the session has none. */
export interface RunBounds {
  /** The last persisted event before the run. */
  readonly before: string | null;
  /** The first persisted event after the run. */
  readonly after: string | null;
}

/**
 * What a report of dropped events reads from the store (report-dropped.ts): the persisted events that
 * bound each run, and whether a hole is reported already. Asynchronous, so that a store across the
 * network answers (PostgreSQL: pg-dropped-run-reads.ts). Ties in `seq` (old databases, `system`): the
 * startup scan keeps the lowest id of a `seq`, so both ends name the lowest id of theirs too.
 */
export interface DroppedRunReads {
  /** The events around the run of `sessionId` from `firstSeq` to `lastSeq`. */
  bounds(sessionId: string, firstSeq: number, lastSeq: number): Promise<RunBounds>;
  /** Whether `reported_gaps` holds the hole of `sessionId` that starts after `gapStartId`. */
  reported(sessionId: string, gapStartId: string): Promise<boolean>;
}

/** Over a SQLite store, answered at the call (the trace writer's connection). */
export function sqliteDroppedRunReads(db: Db): DroppedRunReads {
  const before = db
    .prepare('SELECT id FROM events WHERE session_id = ? AND seq < ? ORDER BY seq DESC, id LIMIT 1')
    .pluck();
  const after = db
    .prepare('SELECT id FROM events WHERE session_id = ? AND seq > ? ORDER BY seq, id LIMIT 1')
    .pluck();
  return {
    bounds: async (sessionId, firstSeq, lastSeq) => ({
      before: (before.get(sessionId, firstSeq) as string | undefined) ?? null,
      after: (after.get(sessionId, lastSeq) as string | undefined) ?? null,
    }),
    reported: async (sessionId, gapStartId) => gapAlreadyReported(db, sessionId, gapStartId),
  };
}
