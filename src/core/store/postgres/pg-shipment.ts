import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { MetisError } from '../../errors.js';
import { nowMicros } from '../../events/clock.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import type { Db } from '../database.js';
import { rootSession } from '../session-lineage.js';
import { SessionStore } from '../session-store.js';
import { COPIED_TABLES, type CopiedTable, EVENT_ROW_AT } from '../store-copy.js';
import { copyTextField, inTransaction } from './pg-util.js';
import { numberSystemEvents } from './system-seq.js';

export interface OutboxEntry {
  readonly n: number;
  readonly tbl: string;
  readonly row_key: string | number;
  readonly op: 'upsert' | 'delete';
}

/** One stretch of the working copy's changes, and the positions it reaches once it is in the store. */
export interface Shipment {
  readonly entries: readonly OutboxEntry[];
  /** Rows of `events` in COPIED_TABLES' column order, in id order. */
  readonly events: readonly unknown[][];
  readonly through: number;
  readonly eventsThrough: string;
}

/** The working copy a shipment comes from, as the store knows it, and how a cluster node ships. */
export interface ShipmentSource {
  readonly db: Db;
  readonly copyId: string;
  readonly label: string;
  /** Number the `system` session's events in the store (ShipperOptions.numberSystemEvents). */
  readonly numberSystemEvents?: boolean;
  /** This node's name: sessions leased to another node are left out (ShipperOptions.fenceFor). */
  readonly fenceFor?: string;
}

const EVENTS = COPIED_TABLES.find((table) => table.name === 'events')!;

/** The column naming the session a table's row belongs to. */
const SESSION_COLUMN: Readonly<Record<string, string>> = {
  sessions: 'id',
  messages: 'session_id',
  tool_calls: 'session_id',
  session_titles: 'session_id',
};

/** Tables whose rows are named by an integer. */
const NUMERIC_KEYS = new Set(['tool_calls', 'pattern_outcomes']);

/**
 * Rows several nodes add children to: a node deletes one when it has no children left in its own copy,
 * but other nodes may have added some to the store since, which the cascade would take with it. In the
 * store it goes only once no child is left there.
 */
const SHARED_PARENTS: Readonly<Record<string, string>> = {
  pattern_fingerprints:
    ' AND NOT EXISTS (SELECT 1 FROM pattern_outcomes o WHERE o.fingerprint_id = pattern_fingerprints.id)',
};

/**
 * One transaction: the new events (COPY: each is shipped once, the position committed with it), the
 * outbox's deletes (children first), its rows' current state (parents first), and the positions.
 * Returns the sessions left out because another node runs them now (always none without `fenceFor`).
 */
export async function ship(
  pool: pg.Pool,
  source: ShipmentSource,
  { entries, events, through, eventsThrough }: Shipment,
): Promise<ReadonlySet<string>> {
  let fenced: ReadonlySet<string> = new Set();
  const latest = new Map<string, Map<string | number, OutboxEntry['op']>>();
  for (const entry of entries) {
    const ops = latest.get(entry.tbl) ?? new Map<string | number, OutboxEntry['op']>();
    latest.set(entry.tbl, ops);
    ops.delete(entry.row_key); // keep the order of the last change
    ops.set(entry.row_key, entry.op);
  }
  await inTransaction(pool, async (client) => {
    if (source.fenceFor !== undefined)
      fenced = await fencedSessions(client, source.db, source.fenceFor, events, entries);
    const kept =
      fenced.size === 0 ? events : events.filter((row) => !fenced.has(row[EVENT_ROW_AT.session] as string));
    const shipped = source.numberSystemEvents
      ? await numberSystemEvents(
          client,
          kept,
          (row) => row[EVENT_ROW_AT.session] as string,
          (row, seq) => {
            const numbered = [...row];
            numbered[EVENT_ROW_AT.seq] = seq;
            return numbered;
          },
        )
      : kept;
    if (shipped.length > 0) await copyEvents(client, shipped);
    // Deletes first (children before parents): a row deleted and one inserted under another key with
    // the same unique value (a pattern fingerprint's key) must not meet in the store.
    for (const table of [...COPIED_TABLES].reverse()) {
      const keys = [...(latest.get(table.name) ?? [])]
        .filter(([, op]) => op === 'delete')
        .map(([key]) => key);
      if (keys.length > 0)
        await client.query(
          `DELETE FROM ${table.name} WHERE ${table.pk} = ANY($1::${NUMERIC_KEYS.has(table.name) ? 'bigint' : 'text'}[])${SHARED_PARENTS[table.name] ?? ''}`,
          [keys],
        );
    }
    for (const table of COPIED_TABLES) {
      const keys = [...(latest.get(table.name) ?? [])]
        .filter(([, op]) => op === 'upsert')
        .map(([key]) => key);
      if (keys.length > 0) await upsert(client, source.db, table, keys, fenced);
    }
    const registered = await client.query(
      'UPDATE metis_working_copies SET shipped_through = $2, events_through = $3, updated_at_us = $4 WHERE copy_id = $1',
      [source.copyId, through, eventsThrough, nowMicros()],
    );
    if (registered.rowCount !== 1)
      throw new MetisError(
        'METIS_ERR_STORE_DIVERGED',
        `${source.label} no longer knows this server's working copy: something else changed the store while this server ran (a restore, a copy into it, a prune, or another server that started on it)`,
      );
  });
  return fenced;
}

/** Events in COPY's text format, in the table's column order. */
async function copyEvents(client: pg.PoolClient, rows: readonly unknown[][]): Promise<void> {
  const text = `${rows.map((row) => row.map(copyTextField).join('\t')).join('\n')}\n`;
  await pipeline(
    Readable.from([text]),
    client.query(copyFrom(`COPY events (${EVENTS.columns.join(', ')}) FROM STDIN`)),
  );
}

async function upsert(
  client: pg.PoolClient,
  db: Db,
  table: CopiedTable,
  keys: readonly (string | number)[],
  fenced: ReadonlySet<string>,
) {
  const columns = table.columns.join(', ');
  const sessionColumn = SESSION_COLUMN[table.name];
  const rows = (
    db
      .prepare(`SELECT ${columns} FROM ${table.name} WHERE ${table.pk} IN (SELECT value FROM json_each(?))`)
      .all(JSON.stringify(keys)) as Record<string, unknown>[]
  ).filter((row) => sessionColumn === undefined || !fenced.has(row[sessionColumn] as string));
  // A row gone since (deleted later, its delete further on in the outbox) has nothing to upsert.
  if (rows.length === 0) return;
  const updates = table.columns
    .filter((column) => column !== table.pk)
    .map((column) => `${column} = EXCLUDED.${column}`)
    .join(', ');
  await client.query(
    `INSERT INTO ${table.name} (${columns})
     SELECT ${columns} FROM json_populate_recordset(NULL::${table.name}, $1::json)
     ON CONFLICT (${table.pk}) DO UPDATE SET ${updates}`,
    [JSON.stringify(rows)],
  );
}

/**
 * The sessions of this shipment whose family root is leased to another node. Every lease row of the
 * shipment's roots is read FOR SHARE, this node's own too: a node taking one of them over waits for this
 * shipment to commit, or this shipment waits for the take-over and sees it (issue 35, cause 1: locking
 * only the other nodes' rows let a take-over pass a shipment under way).
 */
async function fencedSessions(
  client: pg.PoolClient,
  db: Db,
  nodeId: string,
  events: readonly unknown[][],
  entries: readonly OutboxEntry[],
): Promise<ReadonlySet<string>> {
  const sessions = new Set<string>();
  for (const row of events) sessions.add(row[EVENT_ROW_AT.session] as string);
  const ownerOf = new Map<string, ReturnType<Db['prepare']>>();
  for (const entry of entries) {
    const column = SESSION_COLUMN[entry.tbl];
    if (column === undefined || entry.op !== 'upsert') continue;
    let owner = ownerOf.get(entry.tbl);
    if (owner === undefined) {
      const pk = COPIED_TABLES.find((table) => table.name === entry.tbl)!.pk;
      owner = db.prepare(`SELECT ${column} FROM ${entry.tbl} WHERE ${pk} = ?`).pluck();
      ownerOf.set(entry.tbl, owner);
    }
    const session = owner.get(entry.row_key) as string | undefined;
    if (session !== undefined) sessions.add(session);
  }
  sessions.delete(SYSTEM_SESSION_ID);
  if (sessions.size === 0) return new Set();
  const lineage = new SessionStore(db);
  const rootOf = new Map([...sessions].map((id) => [id, rootSession(lineage, id)] as const));
  const leases = await client.query<{ session_id: string; node_id: string }>(
    `SELECT session_id, node_id FROM metis_session_leases WHERE session_id = ANY($1::text[])
      ORDER BY session_id FOR SHARE`,
    [[...new Set(rootOf.values())]],
  );
  const taken = new Set(leases.rows.filter((row) => row.node_id !== nodeId).map((row) => row.session_id));
  return new Set([...sessions].filter((id) => taken.has(rootOf.get(id)!)));
}
