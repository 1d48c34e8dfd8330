import { setTimeout as sleep } from 'node:timers/promises';
import { encodeTime } from 'ulid';
import { AUDIT_EVENT_TYPES } from '../events/catalog/index.js';
import { microsToIso } from '../events/clock.js';
import { EVENT_ID_PREFIX } from '../events/ids.js';
import type { Db } from './database.js';
import { verifyBeforeDelete } from './gap-detector.js';

// The mechanics of a retention sweep (bus §7.3): which rows go, and deleting them in batches beside a
// writer in another process. Who may sweep and what gets recorded is retention.ts.

/**
 * Between two batches the sweep leaves the write lock free for as long as the last batch held it
 * (within these bounds). A server in another process waiting for the lock polls it from SQLite's busy
 * handler at growing intervals (1, 2, 5, 10, 15… ms); with only a turn of the event loop between
 * batches it almost never finds the lock free, and its commits stall for hundreds of milliseconds.
 */
const MIN_PAUSE_MS = 2;
const MAX_PAUSE_MS = 50;
/** Sessions whose archived streaming events one transaction prunes. */
const STREAM_SESSIONS_PER_BATCH = 50;

export interface PurgeProgress {
  readonly deleted: number;
  readonly total: number;
}

/**
 * The smallest event id stamped at or after `ms`: every id of an earlier millisecond sorts below it,
 * so `id < eventIdBound(ms)` is an index range over events older than `ms`.
 */
export function eventIdBound(ms: number): string {
  return `${EVENT_ID_PREFIX}${encodeTime(Math.max(0, Math.floor(ms)), 10)}${'0'.repeat(16)}`;
}

export interface Plan {
  readonly bound: string;
  readonly cutoffUs: number;
  readonly byType: Record<string, number>;
  readonly total: number;
  readonly auditExempt: number;
}

/** Counts the rows older than the cutoff, per type, in one pass over the id index range. */
export function plan(db: Db, cutoffUs: number): Plan {
  const bound = eventIdBound(Math.floor(cutoffUs / 1000) + 1);
  const rows = db
    .prepare(
      'SELECT type, count(*) FROM events INDEXED BY idx_events_id WHERE id < ? AND timestamp_us < ? GROUP BY type',
    )
    .raw()
    .all(bound, cutoffUs) as [string, number][];
  const byType: Record<string, number> = {};
  let total = 0;
  let auditExempt = 0;
  for (const [type, count] of rows) {
    if (AUDIT_EVENT_TYPES.has(type)) {
      auditExempt += count;
    } else {
      byType[type] = count;
      total += count;
    }
  }
  return { bound, cutoffUs, byType, total, auditExempt };
}

/** Timestamp of the oldest row a sweep with this plan keeps (or kept), by id order. */
export function oldestKept(db: Db, p: Plan, audit: string): string | null {
  const oldKept = db
    .prepare(
      `SELECT timestamp_us FROM events WHERE id < ?
         AND (timestamp_us >= ? OR type IN (SELECT value FROM json_each(?))) ORDER BY id LIMIT 1`,
    )
    .pluck()
    .get(p.bound, p.cutoffUs, audit) as number | undefined;
  if (oldKept !== undefined) return microsToIso(oldKept);
  const recent = db
    .prepare('SELECT timestamp_us FROM events WHERE id >= ? ORDER BY id LIMIT 1')
    .pluck()
    .get(p.bound);
  return recent === undefined ? null : microsToIso(recent as number);
}

export interface Sweep {
  readonly deleted: number;
  readonly batches: number;
  readonly byType: Record<string, number>;
}

/**
 * Deletes the rows older than the cutoff (audit types kept) in batches, one IMMEDIATE transaction each.
 * Before each delete, the sessions it touches are verified up to the highest `seq` it removes
 * (`verifyBeforeDelete`), so no later scan mistakes the deleted stretch for a lost one, and a real hole
 * inside it is still reported. Between batches the lock stays free as long as the last batch held it.
 */
export async function sweep(
  db: Db,
  p: Plan,
  audit: string,
  batchSize: number,
  onProgress?: (progress: PurgeProgress) => void,
  /** Runs each batch's transaction (default: as it is); a working copy's keeps its deletes from shipping. */
  wrapBatch: <T>(batch: () => T) => T = (batch) => batch(),
): Promise<Sweep> {
  const selectBatch = db
    .prepare(
      `SELECT id, session_id, seq, type FROM events INDEXED BY idx_events_id
       WHERE id > @after AND id < @bound AND timestamp_us < @cutoff
         AND type NOT IN (SELECT value FROM json_each(@audit))
       ORDER BY id LIMIT @limit`,
    )
    .raw();
  const deleteRow = db.prepare('DELETE FROM events WHERE session_id = ? AND id = ?');
  const params = { after: '', bound: p.bound, cutoff: p.cutoffUs, audit, limit: batchSize };
  const runBatch = db.transaction(() => {
    const rows = selectBatch.all(params) as [string, string, number, string][];
    const upTo = new Map<string, number>();
    for (const [, sessionId, seq] of rows) upTo.set(sessionId, Math.max(seq, upTo.get(sessionId) ?? 0));
    verifyBeforeDelete(db, upTo);
    for (const [id, sessionId] of rows) deleteRow.run(sessionId, id);
    return rows;
  });
  const byType: Record<string, number> = {};
  let deleted = 0;
  let batches = 0;
  onProgress?.({ deleted, total: p.total });
  for (;;) {
    const started = performance.now();
    const rows = wrapBatch(() => runBatch.immediate());
    const heldMs = performance.now() - started;
    if (rows.length === 0) break;
    for (const [id, , , type] of rows) {
      byType[type] = (byType[type] ?? 0) + 1;
      if (id > params.after) params.after = id; // audit rows below the cursor are never scanned again
    }
    deleted += rows.length;
    batches += 1;
    onProgress?.({ deleted, total: Math.max(p.total, deleted) });
    if (rows.length < batchSize) break;
    await sleep(Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, heldMs)));
  }
  await sweepStreamArchive(db, p.bound);
  return { deleted, batches, byType };
}

/**
 * The stream archive (stream/stream-archive.ts) keeps each session's newest streaming events whatever
 * their age; past retention they go too. No replay needs them: a cursor older than the oldest event
 * kept is refused as expired anyway. One session per statement, over the primary key's range.
 */
async function sweepStreamArchive(db: Db, bound: string): Promise<void> {
  const sessions = db.prepare('SELECT DISTINCT session_id FROM stream_events').pluck().all() as string[];
  const deleteOld = db.prepare('DELETE FROM stream_events WHERE session_id = ? AND id < ?');
  const runBatch = db.transaction((batch: readonly string[]) => {
    for (const sessionId of batch) deleteOld.run(sessionId, bound);
  });
  for (let start = 0; start < sessions.length; start += STREAM_SESSIONS_PER_BATCH) {
    const started = performance.now();
    runBatch.immediate(sessions.slice(start, start + STREAM_SESSIONS_PER_BATCH));
    const heldMs = performance.now() - started;
    await sleep(Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, heldMs)));
  }
}
