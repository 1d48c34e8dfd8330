import { existsSync } from 'node:fs';
import { isMetisError, MetisError } from '../errors.js';
import { AUDIT_EVENT_TYPES, type PayloadOf } from '../events/catalog/index.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { openDatabase } from './database.js';
import { handOff } from './handoff-queue.js';
import { acquireLock, describeLockOwner, type LockOwner, lockOwner } from './lock.js';
import { drainHandoffs } from './owner-handoffs.js';
import { oldestKept, type Plan, type PurgeProgress, plan, sweep } from './retention-sweep.js';
import { openTraceContext, reportGaps, type TraceContext } from './trace-context.js';

export { eventIdBound, type PurgeProgress } from './retention-sweep.js';

export const DEFAULT_RETENTION_DAYS = 90;
const DAY_US = 86_400_000_000;
/** Rows per delete transaction: ~10 ms of write lock on a million-row store. */
const DEFAULT_BATCH_SIZE = 500;
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
  /**
   * The pid of the live `metis serve` that owns the database and was handed `trace.swept` to record
   * (DESIGN.md "A session has one owner"); null when this prune owned the database and recorded it.
   */
  readonly handed_to_server_pid: number | null;
  /**
   * On PostgreSQL with servers using the store: the one that recorded `trace.swept` (its node name, else
   * its working copy's id), or null when none had within the wait (the next to look records it).
   * Absent when this prune recorded it itself.
   */
  readonly recorded_by_server?: string | null;
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

function validate(options: PurgeOptions): { days: number; cutoffUs: number; batchSize: number } {
  const days = parseRetentionDays(options.days);
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `batch size must be a positive integer, got ${batchSize}`,
    );
  }
  return { days, cutoffUs: retentionCutoffUs(days, options.nowUs), batchSize };
}

/** The cutoff of a sweep keeping `days` days: unix microseconds, `days` before `nowUs` (default now). */
export function retentionCutoffUs(days: number, nowUs = nowMicros()): number {
  return nowUs - days * DAY_US;
}

/** What the lock file of a prune that owns the database says, so a server refused meanwhile names it. */
export const PRUNE_LOCK_PURPOSE = 'metis trace prune';

type Ownership =
  | { readonly kind: 'own'; readonly release: () => void }
  | { readonly kind: 'beside-server'; readonly owner: LockOwner };

/**
 * Who owns the database for this sweep. No live holder: this prune takes the lock for its duration.
 * A live `metis serve` (an old lock file names no purpose; only servers wrote those): the sweep runs
 * beside it and hands it what to record. Anything else (another prune, a restore): refused.
 */
function takeOwnership(dbPath: string): Ownership {
  let owner = lockOwner(dbPath);
  if (owner === null) {
    try {
      return { kind: 'own', release: acquireLock(dbPath, PRUNE_LOCK_PURPOSE) };
    } catch (error) {
      owner = lockOwner(dbPath); // taken between the look and the lock
      if (!isMetisError(error) || error.code !== 'METIS_ERR_DB_LOCKED' || owner === null) throw error;
    }
  }
  if (owner.purpose === null || owner.purpose === 'metis serve') return { kind: 'beside-server', owner };
  throw new MetisError(
    'METIS_ERR_DB_LOCKED',
    `${dbPath} is in use by another metis process (${describeLockOwner(owner)}); run the prune when it has finished`,
  );
}

/** The `trace.swept` payload (bus §6.14) of a sweep's result. */
export function sweptPayload(swept: PurgeResult): PayloadOf<'trace.swept'> {
  return {
    rows_deleted: swept.rows_deleted,
    rows_audit_exempt: swept.rows_audit_exempt,
    cutoff_timestamp: swept.cutoff_timestamp,
    oldest_kept_timestamp: swept.oldest_kept_timestamp,
    dry_run: false,
    swept_at: swept.swept_at,
  };
}

/**
 * Retention sweep (bus §7.3, DESIGN.md "Retention"): deletes events older than `days` in batches of
 * `batchSize` rows, pausing between them so a server in another process keeps writing. Types in
 * AUDIT_EVENT_TYPES are never deleted. A dry run opens the database read-only and writes nothing.
 *
 * Only the owner of a session writes into it (DESIGN.md "A session has one owner"). With no server on
 * the database, this prune takes its lock for the duration, reports gaps first and records one
 * `trace.swept` in `system` itself. Beside a live `metis serve` it deletes rows (which writes no event
 * and no `seq`) but stamps nothing: `trace.swept`, and any hole found in the rows it deletes, are handed
 * to the server (`owner_handoffs`), which records them with its own bus; gap scans are the server's job.
 * @throws MetisError METIS_ERR_DB_LOCKED when another prune or a restore holds the database.
 */
/**
 * How long one prune batch waits for the write lock. A prune is an operator's command with nothing
 * else on its thread, so it outwaits another process's long transaction (a backup tool, a server
 * catching up after an outage) instead of failing after the 5 s every other command waits.
 */
const PRUNE_BUSY_TIMEOUT_MS = 30_000;

export async function purgeOldEvents(options: PurgeOptions): Promise<PurgeResult> {
  const { cutoffUs, batchSize } = validate(options);
  const audit = JSON.stringify([...AUDIT_EVENT_TYPES]);
  if (options.dryRun) {
    const db = openDatabase(options.dbPath, { readonly: true });
    try {
      const p = plan(db, cutoffUs);
      return result(p, 0, oldestKept(db, p, audit), true, null);
    } finally {
      db.close();
    }
  }
  if (!existsSync(options.dbPath)) {
    throw new MetisError('METIS_ERR_DB_NOT_FOUND', `no database at ${options.dbPath}`);
  }
  const ownership = takeOwnership(options.dbPath);
  if (ownership.kind === 'beside-server') {
    return purgeBesideServer(options, cutoffUs, audit, batchSize, ownership.owner);
  }
  try {
    const context = openTraceContext({
      dbPath: options.dbPath,
      create: false,
      busyTimeoutMs: PRUNE_BUSY_TIMEOUT_MS,
    });
    try {
      return await purgeAsOwner(context, options, cutoffUs, audit, batchSize);
    } finally {
      await context.close();
    }
  } finally {
    ownership.release();
  }
}

async function purgeAsOwner(
  context: TraceContext,
  options: PurgeOptions,
  cutoffUs: number,
  audit: string,
  batchSize: number,
): Promise<PurgeResult> {
  await reportGaps(context); // also records what a server that since stopped was handed and never drained
  const p = plan(context.db, cutoffUs);
  const done = await sweep(context.db, p, audit, batchSize, options.onProgress);
  const swept = result(
    { ...p, byType: done.byType, total: done.deleted },
    done.batches,
    oldestKept(context.db, p, audit),
    false,
    null,
  );
  handOff(context.db, SYSTEM_SESSION_ID, 'trace.swept', sweptPayload(swept));
  const recorded = await drainHandoffs(context);
  if (!recorded.some((h) => h.type === 'trace.swept' && h.payload.swept_at === swept.swept_at)) {
    throw new MetisError(
      'METIS_ERR_STORAGE_BUSY',
      `deleted ${done.deleted} events but could not record trace.swept (it stays queued for the next start)`,
    );
  }
  return swept;
}

async function purgeBesideServer(
  options: PurgeOptions,
  cutoffUs: number,
  audit: string,
  batchSize: number,
  owner: LockOwner,
): Promise<PurgeResult> {
  const db = openDatabase(options.dbPath, { create: false, busyTimeoutMs: PRUNE_BUSY_TIMEOUT_MS });
  try {
    const p = plan(db, cutoffUs);
    const done = await sweep(db, p, audit, batchSize, options.onProgress);
    const swept = result(
      { ...p, byType: done.byType, total: done.deleted },
      done.batches,
      oldestKept(db, p, audit),
      false,
      owner.pid,
    );
    db.transaction(() => handOff(db, SYSTEM_SESSION_ID, 'trace.swept', sweptPayload(swept))).immediate();
    return swept;
  } finally {
    db.close();
  }
}

function result(
  p: Plan,
  batches: number,
  oldest: string | null,
  dryRun: boolean,
  handedTo: number | null,
): PurgeResult {
  return {
    rows_deleted: p.total,
    rows_audit_exempt: p.auditExempt,
    cutoff_timestamp: microsToIso(p.cutoffUs),
    oldest_kept_timestamp: oldest,
    dry_run: dryRun,
    swept_at: microsToIso(nowMicros()),
    batches,
    by_type: p.byType,
    handed_to_server_pid: handedTo,
  };
}
