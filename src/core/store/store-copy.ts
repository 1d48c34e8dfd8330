import { existsSync, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { from as copyFrom } from 'pg-copy-streams';
import { MetisError } from '../errors.js';
import { microsToIso } from '../events/clock.js';
import type { Actor, MetisEvent, Sensitivity } from '../events/envelope.js';
import { type Db, openDatabase } from './database.js';
import { postgresClient } from './postgres/connect.js';
import { assertReadableStore, copyTextField } from './postgres/pg-util.js';
import { migratePostgres, renewStoreEpoch, SERVE_LOCK_SQL } from './postgres/schema.js';

/**
 * What a copy moves, in an order that satisfies every reference (sessions before what belongs to them,
 * fingerprints before their outcomes). `key` pages through a table in key order; `pk` names one row. Bookkeeping tables
 * (gap scans, owner handoffs, the stream archive) are not copied: the destination starts its own.
 */
export const COPIED_TABLES = [
  {
    name: 'sessions',
    pk: 'id',
    // A worker is created after its planner: creation order puts every parent first.
    key: 'created_at_us, id',
    columns: [
      'id',
      'parent_session_id',
      'workspace_path',
      'workspace_hash',
      'active_model',
      'status',
      'disposition',
      'created_at_us',
      'updated_at_us',
      'sticky_model',
      'budget_caps_json',
      'spent_usd',
      'spent_tokens',
      'queue_json',
    ],
  },
  {
    name: 'events',
    pk: 'id',
    key: 'id',
    columns: [
      'session_id',
      'id',
      'seq',
      'timestamp_us',
      'turn_id',
      'parent_event_id',
      'type',
      'actor',
      'sensitivity',
      'payload_json',
    ],
  },
  {
    name: 'messages',
    pk: 'id',
    key: 'id',
    columns: [
      'id',
      'session_id',
      'turn_id',
      'role',
      'content_json',
      'status',
      'model',
      'usage_json',
      'created_at_us',
    ],
  },
  {
    name: 'tool_calls',
    pk: 'row_id',
    key: 'row_id',
    columns: [
      'row_id',
      'id',
      'session_id',
      'turn_id',
      'message_id',
      'tool_name',
      'input_json',
      'status',
      'output_json',
      'error_class',
      'created_at_us',
      'updated_at_us',
    ],
  },
  {
    name: 'session_titles',
    pk: 'session_id',
    key: 'session_id',
    columns: ['session_id', 'title', 'set_at_us'],
  },
  {
    name: 'pattern_fingerprints',
    pk: 'id',
    key: 'id',
    columns: ['id', 'key', 'kind', 'features_json', 'created_at_us'],
  },
  {
    name: 'pattern_outcomes',
    pk: 'id',
    key: 'id',
    columns: ['id', 'fingerprint_id', 'model', 'session_id', 'score', 'cost_usd', 'turns', 'recorded_at_us'],
  },
] as const;

const eventColumn = (name: string) =>
  (COPIED_TABLES.find((table) => table.name === 'events')!.columns as readonly string[]).indexOf(name);
/** Where each column of an `events` row (COPIED_TABLES' order) is. */
export const EVENT_ROW_AT = {
  session: eventColumn('session_id'),
  id: eventColumn('id'),
  seq: eventColumn('seq'),
  timestamp: eventColumn('timestamp_us'),
  turn: eventColumn('turn_id'),
  parent: eventColumn('parent_event_id'),
  type: eventColumn('type'),
  actor: eventColumn('actor'),
  sensitivity: eventColumn('sensitivity'),
  payload: eventColumn('payload_json'),
};

/** An event as a row of `events` in COPIED_TABLES' column order, as the bus stamps one. */
export function copiedRowToEvent(row: readonly unknown[]): MetisEvent {
  return {
    id: row[EVENT_ROW_AT.id] as string,
    timestamp: microsToIso(row[EVENT_ROW_AT.timestamp] as number),
    session_id: row[EVENT_ROW_AT.session] as string,
    turn_id: row[EVENT_ROW_AT.turn] as string | null,
    parent_event_id: row[EVENT_ROW_AT.parent] as string | null,
    type: row[EVENT_ROW_AT.type] as string,
    actor: row[EVENT_ROW_AT.actor] as Actor,
    payload: JSON.parse(row[EVENT_ROW_AT.payload] as string) as Record<string, unknown>,
    sensitivity: row[EVENT_ROW_AT.sensitivity] as Sensitivity,
    seq: row[EVENT_ROW_AT.seq] as number,
  };
}

const TABLES = COPIED_TABLES;
export type CopiedTable = (typeof COPIED_TABLES)[number];
type Table = CopiedTable;
type Row = unknown[];

/** Rows read per page, and written per transaction. */
const PAGE = 5_000;

/** One side of a copy: a SQLite file or a PostgreSQL database. */
interface Endpoint {
  readonly label: string;
  /** The whole table in key order, a page at a time. */
  pages(table: Table): AsyncIterable<Row[]>;
  write(table: Table, rows: Row[]): Promise<void>;
  count(table: Table): Promise<number>;
  /** Per session: how many events, and their lowest and highest `seq`. */
  seqs(): Promise<Map<string, string>>;
  /** After the last write: identity counters past the copied ids. */
  finish(): Promise<void>;
  /** Makes the destination's writes final (PostgreSQL commits its one transaction). */
  commit(): Promise<void>;
  /** Undoes a destination that did not finish: its transaction rolled back, a new file removed. */
  abort(): Promise<void>;
  close(): Promise<void>;
}

export interface CopyProgress {
  readonly table: string;
  readonly rows: number;
}

export interface CopyReport {
  readonly from: string;
  readonly to: string;
  readonly tables: readonly { readonly name: string; readonly rows: number }[];
  readonly sessions: number;
}

export function isPostgresUrl(target: string): boolean {
  return /^postgres(ql)?:\/\//i.test(target);
}

/** A URL without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
    return parsed.toString();
  } catch {
    // Not a URL the parser takes (a password with a '/' in it, say): hide everything before the host.
    return url.replace(/^([a-z][a-z0-9+.-]*:\/\/).*@/i, '$1***@').replace(/([?&]password=)[^&]*/i, '$1***');
  }
}

/**
 * Copies a whole store, SQLite file or PostgreSQL database, into a new one of either kind: tables in
 * reference order, a page at a time, then checks that every table has as many rows on both sides and
 * every session the same event count and `seq` range. The destination must be new: a file that does
 * not exist yet, or a database without metis events.
 */
export async function copyStore(options: {
  readonly from: string;
  readonly to: string;
  readonly onProgress?: (progress: CopyProgress) => void;
  /** A PostgreSQL destination that holds a store has it replaced (`metis restore --force`). */
  readonly replace?: boolean;
  /** How the flags are named in messages (`metis restore` names its own). */
  readonly flags?: { readonly from: string; readonly to: string };
}): Promise<CopyReport> {
  const flags = options.flags ?? { from: '--from', to: '--to' };
  const source = await openEndpoint(options.from, flags.from, 'source', false);
  let destination: Endpoint | null = null;
  let committed = false;
  try {
    destination = await openEndpoint(options.to, flags.to, 'destination', options.replace === true);
    const tables: { name: string; rows: number }[] = [];
    for (const table of TABLES) {
      let rows = 0;
      for await (const page of source.pages(table)) {
        await destination.write(table, page);
        rows += page.length;
        options.onProgress?.({ table: table.name, rows });
      }
      tables.push({ name: table.name, rows });
    }
    await destination.finish();
    for (const table of TABLES) {
      const [have, want] = await Promise.all([destination.count(table), source.count(table)]);
      if (have !== want)
        throw new MetisError(
          'METIS_ERR_COPY_MISMATCH',
          `${table.name}: ${want} rows in ${source.label}, ${have} in ${destination.label}`,
        );
    }
    const [wanted, got] = await Promise.all([source.seqs(), destination.seqs()]);
    for (const [session, range] of wanted)
      if (got.get(session) !== range)
        throw new MetisError(
          'METIS_ERR_COPY_MISMATCH',
          `session ${session}: events ${range} in ${source.label}, ${got.get(session) ?? 'none'} in ${destination.label}`,
        );
    await destination.commit();
    committed = true;
    return { from: source.label, to: destination.label, tables, sessions: wanted.size };
  } finally {
    await source.close();
    if (destination !== null && !committed) await destination.abort();
    await destination?.close();
  }
}

async function openEndpoint(
  target: string,
  flag: string,
  role: 'source' | 'destination',
  replace: boolean,
): Promise<Endpoint> {
  return isPostgresUrl(target) ? openPostgres(target, flag, role, replace) : openSqlite(target, flag, role);
}

function openSqlite(path: string, flag: string, role: 'source' | 'destination'): Endpoint {
  if (role === 'destination' && existsSync(path))
    throw new MetisError('METIS_ERR_DEST_EXISTS', `${flag}: ${path} exists; a copy goes into a new store`);
  let db: Db;
  try {
    db = openDatabase(path, role === 'source' ? { readonly: true } : { create: true });
  } catch (error) {
    if (error instanceof MetisError)
      throw new MetisError(error.code, `${flag}: ${error.message}`, { cause: error });
    throw error;
  }
  // A new file starts with the `system` session (schema.ts); the copy brings the source's own.
  if (role === 'destination') db.prepare("DELETE FROM sessions WHERE id = 'system'").run();
  const inserts = new Map<string, ReturnType<Db['prepare']>>();
  return {
    label: path,
    async *pages(table) {
      const statement = db
        .prepare(`SELECT ${table.columns.join(', ')} FROM ${table.name} ORDER BY ${table.key}`)
        .raw();
      let page: Row[] = [];
      for (const row of statement.iterate() as Iterable<Row>) {
        page.push(row);
        if (page.length === PAGE) {
          yield page;
          page = [];
        }
      }
      if (page.length > 0) yield page;
    },
    async write(table, rows) {
      let insert = inserts.get(table.name);
      if (insert === undefined) {
        insert = db.prepare(
          `INSERT INTO ${table.name} (${table.columns.join(', ')}) VALUES (${table.columns.map(() => '?').join(', ')})`,
        );
        inserts.set(table.name, insert);
      }
      const statement = insert;
      db.transaction(() => {
        for (const row of rows) statement.run(row);
      })();
    },
    async count(table) {
      return db.prepare(`SELECT count(*) FROM ${table.name}`).pluck().get() as number;
    },
    async seqs() {
      const rows = db
        .prepare('SELECT session_id, count(*), min(seq), max(seq) FROM events GROUP BY session_id')
        .raw()
        .all() as [string, number, number, number][];
      return new Map(rows.map(([session, n, low, high]) => [session, `${n} (seq ${low}-${high})`]));
    },
    async finish() {},
    async commit() {},
    async abort() {
      if (role !== 'destination') return;
      db.close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
    },
    async close() {
      if (db.open) db.close();
    },
  };
}

/** Every table a copy writes, for a replacing restore to empty first. */
const ALL_TABLES = TABLES.map((table) => table.name).join(', ');

async function openPostgres(
  url: string,
  flag: string,
  role: 'source' | 'destination',
  replace: boolean,
): Promise<Endpoint> {
  const client = postgresClient(url, 'copy');
  try {
    await client.connect();
    if (role === 'source') {
      // Read what is there, changing nothing: a database without a metis store is refused, not set up,
      // and one transaction gives a consistent snapshot while servers keep writing.
      await assertReadableStore(client, `${flag}: ${redactUrl(url)}`);
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    } else await migratePostgres(client);
    if (role === 'destination') {
      // One transaction for the whole copy: a copy that fails, or does not verify, changes nothing.
      await client.query('BEGIN');
      const used = await client.query('SELECT 1 FROM events LIMIT 1');
      const sessions = await client.query('SELECT 1 FROM sessions LIMIT 1');
      const holdsStore = used.rowCount !== 0 || sessions.rowCount !== 0;
      if (holdsStore && !replace)
        throw new MetisError(
          'METIS_ERR_DEST_EXISTS',
          `${flag}: ${redactUrl(url)} already holds a metis store; nothing was changed`,
          { hint: 'Copy into an empty database, or restore with --force to replace the store it holds.' },
        );
      if (holdsStore) await client.query(`TRUNCATE ${ALL_TABLES}`);
      // A running server's working copy would not see the rewrite: refuse, and hold the lock so that no
      // server starts on the store until the copy is done (the lock goes with the connection).
      const free = await client.query<{ free: boolean }>(
        `SELECT pg_try_advisory_lock(${SERVE_LOCK_SQL}) AS free`,
      );
      if (!free.rows[0]!.free)
        throw new MetisError(
          'METIS_ERR_DB_LOCKED',
          `${flag}: a metis serve is using ${redactUrl(url)}; nothing was changed`,
          { hint: 'Stop the server first.' },
        );
    }
  } catch (error) {
    await client.end().catch(() => {});
    if (error instanceof MetisError) throw error;
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${flag}: cannot use ${redactUrl(url)}: ${(error as Error).message}`,
      {
        cause: error,
        hint: 'Check the URL: host, port, user, password and database, and that this user may create tables there.',
      },
    );
  }
  return {
    label: redactUrl(url),
    async *pages(table) {
      const keys = table.key.split(', ');
      let after: unknown[] | null = null;
      for (;;) {
        const where =
          after === null ? '' : `WHERE (${table.key}) > (${keys.map((_, i) => `$${i + 1}`).join(', ')})`;
        const result = await client.query({
          text: `SELECT ${table.columns.join(', ')} FROM ${table.name} ${where} ORDER BY ${table.key} LIMIT ${PAGE}`,
          values: after ?? [],
          rowMode: 'array',
        });
        const rows = result.rows as Row[];
        if (rows.length === 0) return;
        yield rows;
        const last = rows.at(-1)!;
        after = keys.map((key) => last[(table.columns as readonly string[]).indexOf(key)]);
        if (rows.length < PAGE) return;
      }
    },
    async write(table, rows) {
      const text = rows.map((row) => row.map(copyTextField).join('\t')).join('\n') + '\n';
      await pipeline(
        Readable.from([text]),
        client.query(copyFrom(`COPY ${table.name} (${table.columns.join(', ')}) FROM STDIN`)),
      );
    },
    async count(table) {
      return (await client.query<{ n: number }>(`SELECT count(*)::bigint AS n FROM ${table.name}`)).rows[0]!
        .n;
    },
    async seqs() {
      const result = await client.query({
        text: 'SELECT session_id, count(*), min(seq), max(seq) FROM events GROUP BY session_id',
        rowMode: 'array',
      });
      return new Map(
        (result.rows as [string, number, number, number][]).map(([session, n, low, high]) => [
          session,
          `${n} (seq ${low}-${high})`,
        ]),
      );
    },
    async finish() {
      await renewStoreEpoch(client);
      // Rows copied with their ids: the identity counters continue after the highest.
      for (const [table, column] of [
        ['tool_calls', 'row_id'],
        ['pattern_outcomes', 'id'],
      ])
        await client.query(
          `SELECT setval(pg_get_serial_sequence('${table}', '${column}'), coalesce(max(${column}), 0) + 1, false) FROM ${table}`,
        );
    },
    async commit() {
      if (role === 'destination') await client.query('COMMIT');
    },
    async abort() {
      if (role === 'destination') await client.query('ROLLBACK').catch(() => {});
    },
    async close() {
      await client.end().catch(() => {});
    },
  };
}
