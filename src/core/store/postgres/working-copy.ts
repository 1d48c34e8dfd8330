import { createHash, randomUUID } from 'node:crypto';
import { existsSync, renameSync, rmSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { Logger } from 'pino';
import { MetisError } from '../../errors.js';
import { nowMicros } from '../../events/clock.js';
import { ensureIdsAfter } from '../../events/ids.js';
import { type Db, openDatabase } from '../database.js';
import { COPIED_TABLES, copyStore, redactUrl } from '../store-copy.js';
import { connectHoldingServeLock } from './serve-lock.js';
import { startupStoreError } from './startup-errors.js';

/**
 * `metis serve` on PostgreSQL (docs/decisions.md "The runtime on PostgreSQL"): the runtime, the stream
 * and their queries run on a SQLite working copy of the store in the data folder, exactly as on the
 * embedded store, and every change to it is shipped to PostgreSQL, the store of record (pg-shipper.ts).
 * Triggers put each change of a copied table in `pg_outbox` in the transaction that makes it, so
 * nothing committed locally can miss the shipment, even across a crash.
 *
 * The copy is reused from one start to the next while the store's epoch is the one it was taken at;
 * when something else rewrote the store (a restore, a copy into it, a prune) it is rebuilt from
 * PostgreSQL, unless it holds changes never shipped, which is refused rather than lost.
 */

export interface WorkingCopyOptions {
  readonly url: string;
  /** How the URL was given (`--store`, `$METIS_STORE_URL`, `store.url`): errors name it. */
  readonly setting: string;
  readonly dataDir: string;
  readonly logger: Logger;
  /**
   * A node of a cluster: the store is shared with the other nodes (a shared lock; a copy, restore or
   * prune still needs them all gone), and the copy is rebuilt at every start, since other nodes changed
   * the store while this one was away.
   */
  readonly cluster?: boolean;
  /**
   * Fills a new copy instead of the whole store (a cluster node's: node-copy.ts); returns how many
   * sessions it brought in. The copy's events then continue after the store's newest.
   */
  readonly fill?: (db: Db, client: pg.Client) => Promise<number>;
}

export interface WorkingCopy {
  /** The SQLite file the server opens as its trace store. */
  readonly path: string;
  readonly copyId: string;
  /** Highest outbox number PostgreSQL has: rows at or below it are already shipped. */
  readonly shippedThrough: number;
  /** Highest event id PostgreSQL has from this copy ('' for none): events above it are not shipped yet. */
  readonly eventsThrough: string;
  /** The URL with its password hidden. */
  readonly label: string;
  /** Holds the serve lock on the store; ending it releases the lock. */
  readonly lockHolder: pg.Client;
}

const META_TABLE = 'pg_working_copy';

/**
 * Holds a row while rows brought in from the store are written (a take-over, a session mirrored from
 * the node running it): the outbox triggers skip those, since the store has them already, and sending
 * them back could undo a change the store had since. Only for the length of one transaction.
 */
export const PULLING_TABLE = 'pg_pulling';

/** Runs `write` in one transaction whose changes to copied tables are not shipped (see PULLING_TABLE). */
export function writePulled<T>(db: Db, write: () => T): T {
  const mark = db.prepare(`INSERT INTO ${PULLING_TABLE} (since_us) VALUES (?)`);
  const unmark = db.prepare(`DELETE FROM ${PULLING_TABLE}`);
  return db
    .transaction(() => {
      mark.run(nowMicros());
      try {
        return write();
      } finally {
        unmark.run();
      }
    })
    .immediate();
}

/**
 * The outbox and its triggers: every insert, update and delete of a copied table, in commit order.
 * New events are the exception: the server commits them in id order, so the shipper reads them by id
 * after the last one shipped, and an outbox row per event (which halved the local commit rate) is
 * spared; deleting one (a prune) still goes through the outbox. Events brought in from the store (a
 * cluster node taking a session over, src/core/cluster/session-pull.ts) are listed in
 * `pg_pulled_events`, and that scan skips them: they are in the store already.
 */
function outboxSql(): string {
  const triggers = COPIED_TABLES.flatMap((table) =>
    (
      [
        ['insert', 'INSERT', 'NEW', 'upsert'],
        ['update', 'UPDATE', 'NEW', 'upsert'],
        ['delete', 'DELETE', 'OLD', 'delete'],
      ] as const
    )
      .filter(([name]) => table.name !== 'events' || name === 'delete')
      .map(
        ([name, on, row, op]) =>
          `DROP TRIGGER IF EXISTS pg_outbox_${table.name}_${name};
         CREATE TRIGGER pg_outbox_${table.name}_${name} AFTER ${on} ON ${table.name}
         WHEN NOT EXISTS (SELECT 1 FROM ${PULLING_TABLE})
         BEGIN INSERT INTO pg_outbox (tbl, row_key, op) VALUES ('${table.name}', ${row}.${table.pk}, '${op}'); END;`,
      ),
  );
  return `
    DROP TRIGGER IF EXISTS pg_outbox_events_insert;
    DROP TRIGGER IF EXISTS pg_outbox_events_update;
    CREATE TABLE IF NOT EXISTS ${META_TABLE} (copy_id TEXT NOT NULL, epoch TEXT NOT NULL, events_through TEXT NOT NULL DEFAULT '');
    CREATE TABLE IF NOT EXISTS pg_outbox (n INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, row_key NOT NULL, op TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS pg_pulled_events (id TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${PULLING_TABLE} (since_us INTEGER NOT NULL);
    ${triggers.join('\n')}`;
}

/** The working copy's file for a store: one per database, in the data folder. */
export function workingCopyPath(dataDir: string, url: string): string {
  const parsed = new URL(url);
  const where = `${parsed.hostname}:${parsed.port || '5432'}/${decodeURIComponent(parsed.pathname.slice(1))}`;
  return join(dataDir, `pg-${createHash('sha256').update(where).digest('hex').slice(0, 12)}.db`);
}

/**
 * Connects to the store (bringing its schema up to date), takes the serve lock, and returns a working
 * copy that matches it, rebuilt when it does not. The copy chosen becomes the store's only registered
 * one: a copy elsewhere (another data folder, another host) that shipped before is stale from now on,
 * and its own shipments are refused (the registration is what fences a server that lost the lock).
 * @throws MetisError METIS_ERR_STORE_UNUSABLE (exit 2) naming the setting for a store that cannot be
 *   used; METIS_ERR_DB_LOCKED when another server uses it; METIS_ERR_STORE_DIVERGED as above.
 */
export async function prepareWorkingCopy(options: WorkingCopyOptions): Promise<WorkingCopy> {
  const label = redactUrl(options.url);
  let lockHolder: pg.Client | null = null;
  try {
    const path = workingCopyPath(options.dataDir, options.url);
    const cluster = options.cluster === true;
    lockHolder = await connectHoldingServeLock(options.url, options.setting, label, cluster);
    const client = lockHolder;
    const epoch = (await client.query<{ epoch: string }>('SELECT epoch FROM metis_store_epoch')).rows[0]!
      .epoch;
    if (cluster) {
      const previous = setAsideUnshipped(path, await unshippedOf(client, path), options.logger);
      const copy = await rebuild(options, client, path, epoch);
      // The other nodes' copies stay registered: only this node's previous one is stale.
      if (previous !== null)
        await client.query('DELETE FROM metis_working_copies WHERE copy_id = $1', [previous]);
      return { path, ...copy, label, lockHolder: client };
    }
    const copy =
      (await reusable(client, path, epoch, label)) ?? (await rebuild(options, client, path, epoch));
    await client.query('DELETE FROM metis_working_copies WHERE copy_id <> $1', [copy.copyId]);
    return { path, ...copy, label, lockHolder: client };
  } catch (error) {
    await lockHolder?.end().catch(() => {});
    if (error instanceof MetisError && error.code !== 'METIS_ERR_SCHEMA_VERSION') throw error;
    throw startupStoreError(error, options.setting, label);
  }
}

/** A copy's id and how many of its changes the store lacks (null when there is no copy). */
async function unshippedOf(
  client: pg.Client,
  path: string,
): Promise<{ copyId: string; unshipped: number } | null> {
  if (!existsSync(path)) return null;
  const db = openDatabase(path, { create: false });
  try {
    db.exec(outboxSql());
    const meta = db.prepare(`SELECT copy_id, events_through FROM ${META_TABLE}`).get() as
      | { copy_id: string; events_through: string }
      | undefined;
    if (meta === undefined) return null;
    const registered = (
      await client.query<{ shipped_through: number; events_through: string }>(
        'SELECT shipped_through, events_through FROM metis_working_copies WHERE copy_id = $1',
        [meta.copy_id],
      )
    ).rows[0];
    return { copyId: meta.copy_id, unshipped: countUnshipped(db, registered, meta.events_through) };
  } finally {
    db.close();
  }
}

/**
 * A node's copy that still holds changes never shipped (the node was killed, or lost the store) is
 * kept beside the new one rather than shipped: its sessions may have been taken over and run on by
 * another node since, and what it holds would contradict that. Returns the old copy's id.
 */
function setAsideUnshipped(
  path: string,
  state: { copyId: string; unshipped: number } | null,
  logger: Logger,
): string | null {
  if (state === null) return null;
  if (state.unshipped > 0) {
    const aside = `${path}.unshipped-${Date.now()}`;
    for (const suffix of ['', '-wal', '-shm'])
      if (existsSync(`${path}${suffix}`)) renameSync(`${path}${suffix}`, `${aside}${suffix}`);
    logger.error(
      { unshipped: state.unshipped, kept: aside },
      'the working copy held changes never sent to the store; kept aside, not sent (another node may have run those sessions since)',
    );
  }
  return state.copyId;
}

/** Changes in a copy the store lacks, by what the store (else the copy itself) says was shipped. */
function countUnshipped(
  db: Db,
  registered: { shipped_through: number; events_through: string } | undefined,
  ownEventsThrough: string,
): number {
  const shippedThrough = registered?.shipped_through ?? 0;
  const eventsThrough = registered?.events_through ?? ownEventsThrough;
  return (
    (db.prepare('SELECT count(*) FROM pg_outbox WHERE n > ?').pluck().get(shippedThrough) as number) +
    (db
      .prepare(
        'SELECT count(*) FROM events e WHERE id > ? AND NOT EXISTS (SELECT 1 FROM pg_pulled_events p WHERE p.id = e.id)',
      )
      .pluck()
      .get(eventsThrough) as number)
  );
}

interface Positions {
  readonly copyId: string;
  readonly shippedThrough: number;
  readonly eventsThrough: string;
}

/**
 * The copy at `path` when it is the store's registered copy of the current epoch and holds at least
 * what the store says it shipped (a copy restored from an older file snapshot does not); null when it
 * must be rebuilt. A copy holding changes never shipped is refused rather than rebuilt over.
 */
async function reusable(
  client: pg.Client,
  path: string,
  epoch: string,
  label: string,
): Promise<Positions | null> {
  if (!existsSync(path)) return null;
  const db = openDatabase(path, { create: false });
  try {
    db.exec(outboxSql());
    const meta = db.prepare(`SELECT copy_id, epoch, events_through FROM ${META_TABLE}`).get() as
      | { copy_id: string; epoch: string; events_through: string }
      | undefined;
    const registered =
      meta === undefined
        ? undefined
        : (
            await client.query<{ epoch: string; shipped_through: number; events_through: string }>(
              'SELECT epoch, shipped_through, events_through FROM metis_working_copies WHERE copy_id = $1',
              [meta.copy_id],
            )
          ).rows[0];
    const outboxCounter = (db
      .prepare("SELECT seq FROM sqlite_sequence WHERE name = 'pg_outbox'")
      .pluck()
      .get() ?? 0) as number;
    const newestEvent = (db.prepare("SELECT coalesce(max(id), '') FROM events").pluck().get() ??
      '') as string;
    if (
      meta !== undefined &&
      registered !== undefined &&
      meta.epoch === epoch &&
      registered.epoch === epoch &&
      outboxCounter >= registered.shipped_through &&
      newestEvent >= registered.events_through
    )
      return {
        copyId: meta.copy_id,
        shippedThrough: registered.shipped_through,
        eventsThrough: registered.events_through,
      };
    // What this copy knows it shipped: the store's word while it still registers the copy, else its own.
    const unshipped = countUnshipped(db, registered, meta?.events_through ?? '');
    if (unshipped > 0)
      throw new MetisError(
        'METIS_ERR_STORE_DIVERGED',
        `the working copy ${path} holds ${unshipped} changes never sent to ${label}, and that store was ` +
          'changed since by something else (a restore, a copy into it, a prune, or a server using another working copy): sending them now could contradict it',
      );
    return null;
  } finally {
    db.close();
  }
}

/**
 * A new working copy from the store (a whole-store copy), registered with it before it takes the copy's
 * place. The store of record counts as verified: each session's gap-scan cursor starts at its newest
 * event, so holes a prune left there are not reported again by every copy built from it.
 */
async function rebuild(
  options: WorkingCopyOptions,
  client: pg.Client,
  path: string,
  epoch: string,
): Promise<Positions> {
  const building = `${path}.building`;
  removeDatabaseFiles(building);
  const filled = options.fill === undefined ? null : await fillNew(building, client, options.fill);
  if (filled === null)
    options.logger.info(
      { store: redactUrl(options.url), path },
      'building the working copy of the PostgreSQL store',
    );
  const report =
    filled !== null
      ? null
      : await copyStore({
          from: options.url,
          to: building,
          flags: { from: options.setting, to: 'the working copy' },
        });
  const copyId = randomUUID();
  const db: Db = openDatabase(building, { create: false });
  let eventsThrough: string;
  try {
    eventsThrough =
      filled?.eventsThrough ??
      (db.prepare('SELECT max(id) FROM events').pluck().get() as string | null) ??
      '';
    db.exec(outboxSql());
    db.prepare(
      `INSERT INTO gap_scan_state (session_id, last_seq, last_id)
       SELECT session_id, max(seq), id FROM events GROUP BY session_id`,
    ).run();
    db.prepare(`INSERT INTO ${META_TABLE} (copy_id, epoch, events_through) VALUES (?, ?, ?)`).run(
      copyId,
      epoch,
      eventsThrough,
    );
    // A store that never had a server lacks the `system` session a new SQLite file starts with; made
    // here, it is shipped like any other change.
    db.prepare(
      "INSERT OR IGNORE INTO sessions (id, status, created_at_us, updated_at_us) VALUES ('system', 'active', 0, 0)",
    ).run();
  } finally {
    db.close();
  }
  await client.query(
    `INSERT INTO metis_working_copies (copy_id, epoch, shipped_through, events_through, host, updated_at_us)
     VALUES ($1, $2, 0, $3, $4, $5)`,
    [copyId, epoch, eventsThrough, hostname(), nowMicros()],
  );
  removeDatabaseFiles(path);
  renameSync(building, path);
  options.logger.info(
    report === null
      ? { sessions: filled!.sessions }
      : {
          events: report.tables.find((table) => table.name === 'events')?.rows ?? 0,
          sessions: report.sessions,
        },
    'working copy ready',
  );
  // Ids made here from now on sort after every event the store holds: the shipper sends this copy's
  // own events by id, from `eventsThrough` on.
  if (eventsThrough !== '') ensureIdsAfter(eventsThrough);
  return { copyId, shippedThrough: 0, eventsThrough };
}

/**
 * A new copy at `path` with the schema and what `fill` brings in; `eventsThrough` is the store's
 * newest event when it began (what the other nodes commit meanwhile is theirs to ship).
 */
async function fillNew(
  path: string,
  client: pg.Client,
  fill: (db: Db, client: pg.Client) => Promise<number>,
): Promise<{ eventsThrough: string; sessions: number }> {
  const eventsThrough =
    (await client.query<{ newest: string | null }>('SELECT max(id) AS newest FROM events')).rows[0]?.newest ??
    '';
  const db = openDatabase(path, { create: true });
  try {
    db.exec(outboxSql());
    return { eventsThrough, sessions: await fill(db, client) };
  } finally {
    db.close();
  }
}

function removeDatabaseFiles(path: string): void {
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
}
