import { setTimeout as sleep } from 'node:timers/promises';
import { encodeTime } from 'ulid';
import { MetisError } from '../errors.js';
import { AUDIT_EVENT_TYPES } from '../events/catalog/index.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { EVENT_ID_PREFIX } from '../events/ids.js';
import { type Db, openDatabase } from './database.js';
import { openTraceContext, reportGaps } from './trace-context.js';

export const DEFAULT_RETENTION_DAYS = 90;
const DAY_US = 86_400_000_000;
/** Rows per delete transaction: ~10 ms of write lock on a million-row store. */
const DEFAULT_BATCH_SIZE = 500;
/**
 * Between two batches the sweep leaves the write lock free for as long as the last batch held it
 * (within these bounds). A server in another process waiting for the lock polls it from SQLite's busy
 * handler at growing intervals (1, 2, 5, 10, 15… ms); with only a turn of the event loop between
 * batches it almost never finds the lock free, and its commits stall for hundreds of milliseconds.
 */
const MIN_PAUSE_MS = 2;
const MAX_PAUSE_MS = 50;

/** What `metis trace prune` did (or would do): the `trace.swept` payload (bus §6.14) plus details. */
export interface PurgeResult {
  /** Rows deleted; in a dry run, the rows that would be deleted. */
  readonly rows_deleted: number;
  /** Audit-typed rows older than the cutoff that were kept (§7.6). */
  readonly rows_audit_exempt: number;
  readonly cutoff_timestamp: string;
  /** Oldest event still stored (by id order), or null when none is left. */
  readonly oldest_kept_timestamp: string | null;
  readonly dry_run: boolean;
  readonly swept_at: string;
  readonly batches: number;
  /** Rows deleted (or, in a dry run, that would be) per type. */
  readonly by_type: Readonly<Record<string, number>>;
}

export interface PurgeProgress {
  readonly deleted: number;
  readonly total: number;
}

export interface PurgeOptions {
  readonly dbPath: string;
  readonly days?: number;
  readonly dryRun?: boolean;
  readonly batchSize?: number;
  /** The sweep's "now" in unix microseconds (tests); defaults to the clock. */
  readonly nowUs?: number;
  readonly onProgress?: (progress: PurgeProgress) => void;
}

/**
 * The smallest event id stamped at or after `ms`: every id of an earlier millisecond sorts below it,
 * so `id < eventIdBound(ms)` is an index range over events older than `ms`.
 */
export function eventIdBound(ms: number): string {
  return `${EVENT_ID_PREFIX}${encodeTime(Math.max(0, Math.floor(ms)), 10)}${'0'.repeat(16)}`;
}

/** Parses `--days`: a positive integer. @throws MetisError METIS_ERR_INVALID_ARGUMENT naming the flag. */
export function parseRetentionDays(raw: string | number | undefined): number {
  if (raw === undefined) return DEFAULT_RETENTION_DAYS;
  const text = String(raw).trim();
  const days = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(days) || days < 1 || days > 1_000_000) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--days must be a whole number of days from 1 to 1,000,000, got "${raw}"`,
    );
  }
  return days;
}

interface Plan {
  readonly bound: string;
  readonly cutoffUs: number;
  readonly byType: Record<string, number>;
  readonly total: number;
  readonly auditExempt: number;
}

/** Counts the rows older than the cutoff, per type, in one pass over the id index range. */
function plan(db: Db, cutoffUs: number): Plan {
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
function oldestKept(db: Db, p: Plan, audit: string): string | null {
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

function validate(options: PurgeOptions): { days: number; cutoffUs: number; batchSize: number } {
  const days = parseRetentionDays(options.days);
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `batch size must be a positive integer, got ${batchSize}`,
    );
  }
  return { days, cutoffUs: (options.nowUs ?? nowMicros()) - days * DAY_US, batchSize };
}

/**
 * Retention sweep (bus §7.3, DESIGN.md "Retention"): deletes events older than `days` in batches of
 * `batchSize` rows, one `BEGIN IMMEDIATE` transaction each, pausing between them as long as the last
 * batch held the lock, so a server in another process keeps writing. Types in AUDIT_EVENT_TYPES are
 * never deleted. Unless `dryRun`, gaps are reported first and one `trace.swept` is recorded through the
 * bus at the end. A dry run opens the database read-only and writes nothing.
 */
export async function purgeOldEvents(options: PurgeOptions): Promise<PurgeResult> {
  const { cutoffUs, batchSize } = validate(options);
  const audit = JSON.stringify([...AUDIT_EVENT_TYPES]);
  if (options.dryRun) {
    const db = openDatabase(options.dbPath, { readonly: true });
    try {
      const p = plan(db, cutoffUs);
      return result(p, 0, oldestKept(db, p, audit), true);
    } finally {
      db.close();
    }
  }

  const context = openTraceContext({ dbPath: options.dbPath, create: false });
  try {
    await reportGaps(context);
    const p = plan(context.db, cutoffUs);
    const deleteBatch = context.db
      .prepare(
        `DELETE FROM events WHERE id IN (
           SELECT id FROM events INDEXED BY idx_events_id
           WHERE id > @after AND id < @bound AND timestamp_us < @cutoff
             AND type NOT IN (SELECT value FROM json_each(@audit))
           ORDER BY id LIMIT @limit)
         RETURNING id, type`,
      )
      .raw();
    const params = { after: '', bound: p.bound, cutoff: cutoffUs, audit, limit: batchSize };
    const runBatch = context.db.transaction(() => deleteBatch.all(params) as [string, string][]);
    const byType: Record<string, number> = {};
    let deleted = 0;
    let batches = 0;
    options.onProgress?.({ deleted, total: p.total });
    for (;;) {
      const started = performance.now();
      const rows = runBatch.immediate();
      const heldMs = performance.now() - started;
      if (rows.length === 0) break;
      for (const [id, type] of rows) {
        byType[type] = (byType[type] ?? 0) + 1;
        if (id > params.after) params.after = id; // audit rows below the cursor are never scanned again
      }
      deleted += rows.length;
      batches += 1;
      options.onProgress?.({ deleted, total: Math.max(p.total, deleted) });
      if (rows.length < batchSize) break;
      await sleep(Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, heldMs)));
    }
    const done: Plan = { ...p, byType, total: deleted };
    const swept = result(done, batches, oldestKept(context.db, p, audit), false);
    context.bus.emit({
      type: 'trace.swept',
      session_id: SYSTEM_SESSION_ID,
      payload: {
        rows_deleted: swept.rows_deleted,
        rows_audit_exempt: swept.rows_audit_exempt,
        cutoff_timestamp: swept.cutoff_timestamp,
        oldest_kept_timestamp: swept.oldest_kept_timestamp,
        dry_run: false,
        swept_at: swept.swept_at,
      },
    });
    await context.flush();
    if (context.writer.stats.droppedEvents > 0) {
      throw new MetisError(
        'METIS_ERR_SQLITE_BUSY',
        `deleted ${deleted} events but could not record trace.swept`,
      );
    }
    return swept;
  } finally {
    await context.close();
  }
}

function result(p: Plan, batches: number, oldest: string | null, dryRun: boolean): PurgeResult {
  return {
    rows_deleted: p.total,
    rows_audit_exempt: p.auditExempt,
    cutoff_timestamp: microsToIso(p.cutoffUs),
    oldest_kept_timestamp: oldest,
    dry_run: dryRun,
    swept_at: microsToIso(nowMicros()),
    batches,
    by_type: p.byType,
  };
}
