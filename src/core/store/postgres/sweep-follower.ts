import type pg from 'pg';
import type { Logger } from 'pino';
import { AUDIT_EVENT_TYPES } from '../../events/catalog/index.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import { type Db, openDatabase } from '../database.js';
import { handOff } from '../handoff-queue.js';
import { plan, sweep } from '../retention-sweep.js';
import { checkOut } from './pg-util.js';
import { writePulled } from './working-copy.js';

/**
 * A server's side of a retention sweep run on its PostgreSQL store while it serves (pg-prune.ts,
 * docs/decisions.md "Retention on PostgreSQL while servers run"). The prune deletes from the store and
 * leaves a row in `metis_retention_sweeps`; each server then:
 *
 * - deletes the same rows from its working copy (the newest cutoff covers every earlier one, since a
 *   sweep removes everything older than its cutoff), in batches beside the server's own writer and
 *   without shipping the deletes (the store has already done them);
 * - records `trace.swept` for a finished sweep nobody has recorded yet, claimed in the store so that
 *   exactly one server does: through the handoff queue of its working copy, which the server's own
 *   bus empties (owner-handoffs.ts), so the `system` session is numbered by its owner, as always.
 *
 * It uses a connection of its own to the copy: the server's handoff watch sees only other connections'
 * commits. A sweep finished while no server ran is found by the next start's first look.
 */

/** How often a server looks for a sweep: retention is not urgent, but a prune waits for its record. */
const DEFAULT_INTERVAL_MS = 1000;
const BATCH_SIZE = 2000;
const APPLIED_TABLE = 'pg_sweeps_applied';

export interface SweepFollowerOptions {
  readonly pool: pg.Pool;
  /** The working copy's file. */
  readonly path: string;
  /** Who claims a record (the node's name, else the copy's id): shown in the store for whoever asks. */
  readonly claimant: string;
  readonly logger: Logger;
  readonly intervalMs?: number;
}

/** Starts following; the returned function stops it and waits for a look under way. */
export function followSweeps(options: SweepFollowerOptions): () => Promise<void> {
  const { logger } = options;
  let db: Db | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  const look = async () => {
    db ??= openDatabase(options.path, { create: false });
    db.exec(`CREATE TABLE IF NOT EXISTS ${APPLIED_TABLE} (cutoff_us INTEGER NOT NULL)`);
    await applyNewestCutoff(options.pool, db);
    await recordFinishedSweeps(options.pool, db, options.claimant);
  };
  const tick = () => {
    if (running !== null || stopped) return;
    running = look()
      .catch((error: unknown) => {
        // The store away, the copy locked for long: the next look tries again.
        logger.warn(
          { err: (error as Error).message },
          'could not follow a retention sweep of the store; retrying',
        );
      })
      .finally(() => {
        running = null;
      });
  };
  tick();
  const timer = setInterval(tick, options.intervalMs ?? DEFAULT_INTERVAL_MS);
  timer.unref();
  return async () => {
    stopped = true;
    clearInterval(timer);
    await running;
    db?.close();
    db = null;
  };
}

/** Deletes from the copy what the store's newest sweep deleted, once per cutoff. */
async function applyNewestCutoff(pool: pg.Pool, db: Db): Promise<void> {
  const newest = (
    await pool.query<{ cutoff_us: number | null }>(
      'SELECT max(cutoff_us) AS cutoff_us FROM metis_retention_sweeps',
    )
  ).rows[0]?.cutoff_us;
  if (newest === null || newest === undefined) return;
  const applied =
    (db.prepare(`SELECT max(cutoff_us) FROM ${APPLIED_TABLE}`).pluck().get() as number | null) ?? 0;
  if (newest <= applied) return;
  const audit = JSON.stringify([...AUDIT_EVENT_TYPES]);
  await sweep(db, plan(db, newest), audit, BATCH_SIZE, undefined, (batch) => writePulled(db, batch));
  db.transaction(() => {
    db.prepare(`DELETE FROM ${APPLIED_TABLE}`).run();
    db.prepare(`INSERT INTO ${APPLIED_TABLE} (cutoff_us) VALUES (?)`).run(newest);
  }).immediate();
}

/**
 * Claims each finished sweep nobody recorded and hands its `trace.swept` to the server. The claim
 * commits after the handoff: a server that dies in between leaves the sweep to another (at least once;
 * the handoff of one that died after committing it is recorded at its next start).
 */
async function recordFinishedSweeps(pool: pg.Pool, db: Db, claimant: string): Promise<void> {
  const open = await pool.query<{ sweep_id: string }>(
    'SELECT sweep_id FROM metis_retention_sweeps WHERE swept_json IS NOT NULL AND recorded_by IS NULL ORDER BY sweep_id',
  );
  for (const { sweep_id: sweepId } of open.rows) {
    const { client, release } = await checkOut(pool);
    try {
      await client.query('BEGIN');
      const claimed = await client.query<{ swept_json: string }>(
        `UPDATE metis_retention_sweeps SET recorded_by = $2
         WHERE sweep_id = $1 AND recorded_by IS NULL RETURNING swept_json`,
        [sweepId, claimant],
      );
      const swept = claimed.rows[0]?.swept_json;
      if (swept !== undefined)
        db.transaction(() => handOff(db, SYSTEM_SESSION_ID, 'trace.swept', JSON.parse(swept))).immediate();
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      release();
    }
  }
}
