import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { EventBus } from '../../bus/event-bus.js';
import { MetisError } from '../../errors.js';
import { AUDIT_EVENT_TYPES } from '../../events/catalog/index.js';
import { microsToIso, nowMicros } from '../../events/clock.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import { ensureIdsAfter } from '../../events/ids.js';
import { type PurgeProgress, type PurgeResult, sweptPayload } from '../retention.js';
import { eventIdBound } from '../retention-sweep.js';
import { redactUrl } from '../store-copy.js';
import { postgresClient } from './connect.js';
import { PgEventStore } from './pg-event-store.js';
import { assertReadableStore } from './pg-util.js';
import { migratePostgres, renewStoreEpoch, SERVE_LOCK_SQL } from './schema.js';
import { startupStoreError } from './startup-errors.js';

export interface PostgresPurgeOptions {
  readonly url: string;
  /** The sweep's cutoff, unix microseconds: events stamped before it go (audit types stay). */
  readonly cutoffUs: number;
  readonly dryRun: boolean;
  readonly batchSize: number;
  readonly onProgress?: (progress: PurgeProgress) => void;
  /** How the URL was given (`--store`, `$METIS_STORE_URL`, `store.url`), for messages. */
  readonly setting?: string;
  /** While servers use the store: how long to wait for one of them to record the sweep (default 15 s). */
  readonly recordWaitMs?: number;
}

/**
 * Retention on a PostgreSQL store (bus §7.3): what `purgeOldEvents` does to a SQLite file, with the
 * same result and the same `trace.swept` in the `system` session. Each batch is one short DELETE of
 * its own, so writers wait for one batch at most. Servers may keep running: each deletes the same rows
 * from its working copy and one records `trace.swept` (sweep-follower.ts), since only a session's owner
 * numbers its events. With none running, the prune records it and marks the store rewritten (its
 * epoch) before it deletes anything: the next server start rebuilds its working copy.
 */
export async function purgePostgres(options: PostgresPurgeOptions): Promise<PurgeResult> {
  const setting = options.setting ?? '--store';
  const label = redactUrl(options.url);
  const client = postgresClient(options.url, 'prune');
  try {
    await client.connect().catch((error: unknown) => {
      throw new MetisError(
        'METIS_ERR_STORE_UNUSABLE',
        `${setting}: cannot use ${label}: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    });
    await assertReadableStore(client, `${setting}: ${label}`);
    const audit = [...AUDIT_EVENT_TYPES];
    const bound = eventIdBound(Math.floor(options.cutoffUs / 1000) + 1);
    const planned = await client.query<{ type: string; n: number }>(
      'SELECT type, count(*)::bigint AS n FROM events WHERE id < $1 AND timestamp_us < $2 GROUP BY type',
      [bound, options.cutoffUs],
    );
    const byType: Record<string, number> = {};
    let total = 0;
    let auditExempt = 0;
    for (const { type, n } of planned.rows) {
      if (AUDIT_EVENT_TYPES.has(type)) auditExempt += n;
      else {
        byType[type] = n;
        total += n;
      }
    }
    const oldestKept = async () => {
      const row = await client.query<{ t: number }>(
        'SELECT timestamp_us AS t FROM events WHERE timestamp_us >= $1 OR type = ANY($2) ORDER BY id LIMIT 1',
        [options.cutoffUs, audit],
      );
      return row.rows[0] === undefined ? null : microsToIso(row.rows[0].t);
    };
    const result = (batches: number, oldest: string | null): PurgeResult => ({
      rows_deleted: total,
      rows_audit_exempt: auditExempt,
      cutoff_timestamp: microsToIso(options.cutoffUs),
      oldest_kept_timestamp: oldest,
      dry_run: options.dryRun,
      swept_at: microsToIso(nowMicros()),
      batches,
      by_type: byType,
      handed_to_server_pid: null,
    });
    if (options.dryRun) return result(0, await oldestKept());

    // A store older than this metis gets the bookkeeping the sweep is recorded in.
    await migratePostgres(client).catch((error: unknown) => {
      throw startupStoreError(error, setting, label);
    });
    const locked = await client.query<{ free: boolean }>(
      `SELECT pg_try_advisory_lock(${SERVE_LOCK_SQL}) AS free`,
    );
    // No server: this prune owns the store, marks every working copy stale and records the sweep. With
    // servers running, they follow it (sweep-follower.ts): the row below, written before the first
    // delete, tells each to delete the same rows from its copy, and one of them records it.
    const online = !locked.rows[0]!.free;
    const sweepId = `${String(nowMicros()).padStart(17, '0')}-${randomUUID().slice(0, 8)}`;
    await client.query('BEGIN');
    if (!online) await renewStoreEpoch(client);
    await client.query(
      'INSERT INTO metis_retention_sweeps (sweep_id, cutoff_us, started_at_us) VALUES ($1, $2, $3)',
      [sweepId, options.cutoffUs, nowMicros()],
    );
    await client.query('COMMIT');
    let deleted = 0;
    let batches = 0;
    let after = '';
    for (const type of Object.keys(byType)) byType[type] = 0;
    options.onProgress?.({ deleted, total });
    for (;;) {
      // The cursor skips the audit rows kept below it instead of reading them again every batch.
      const gone = await client.query<{ id: string; type: string }>(
        `DELETE FROM events WHERE id IN (
           SELECT id FROM events WHERE id > $5 AND id < $1 AND timestamp_us < $2 AND type <> ALL($3)
           ORDER BY id LIMIT $4)
         RETURNING id, type`,
        [bound, options.cutoffUs, audit, options.batchSize, after],
      );
      if (gone.rows.length === 0) break;
      for (const row of gone.rows) {
        byType[row.type] = (byType[row.type] ?? 0) + 1;
        if (row.id > after) after = row.id;
      }
      deleted += gone.rows.length;
      batches += 1;
      options.onProgress?.({ deleted, total: Math.max(total, deleted) });
      if (gone.rows.length < options.batchSize) break;
    }
    total = deleted;
    for (const [type, count] of Object.entries(byType)) if (count === 0) delete byType[type];
    const swept = result(batches, await oldestKept());
    const payload = JSON.stringify(sweptPayload(swept));
    if (!online) {
      await recordSwept(options.url, swept);
      await client.query(
        "UPDATE metis_retention_sweeps SET swept_json = $2, recorded_by = 'metis trace prune' WHERE sweep_id = $1",
        [sweepId, payload],
      );
      return swept;
    }
    await client.query('UPDATE metis_retention_sweeps SET swept_json = $2 WHERE sweep_id = $1', [
      sweepId,
      payload,
    ]);
    return { ...swept, recorded_by_server: await recorder(client, sweepId, options.recordWaitMs) };
  } finally {
    await client.end().catch(() => {});
  }
}

/** The server that recorded the sweep, once one has (sweep-follower.ts); null when none did in time. */
async function recorder(client: pg.Client, sweepId: string, waitMs = 15_000): Promise<string | null> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const row = await client.query<{ recorded_by: string | null }>(
      'SELECT recorded_by FROM metis_retention_sweeps WHERE sweep_id = $1',
      [sweepId],
    );
    const by = row.rows[0]?.recorded_by ?? null;
    if (by !== null || Date.now() >= deadline) return by;
    await sleep(200);
  }
}

/** `trace.swept` in the `system` session, stamped like any event: ids and `seq` after the stored ones. */
async function recordSwept(url: string, swept: PurgeResult): Promise<void> {
  const store = await PgEventStore.open({ url });
  try {
    ensureIdsAfter(await store.lastEventId());
    const lastSeq = await store.lastSeq(SYSTEM_SESSION_ID);
    const event = new EventBus({ lastSeq: () => lastSeq }).emit({
      type: 'trace.swept',
      session_id: SYSTEM_SESSION_ID,
      payload: sweptPayload(swept),
    });
    if (event !== null) await store.append([event]);
  } finally {
    await store.close();
  }
}
