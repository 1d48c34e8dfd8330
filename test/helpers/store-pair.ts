import { copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { postgresPool } from '../../src/core/store/postgres/connect.js';
import { copyStore } from '../../src/core/store/store-copy.js';
import { freshDatabase, type PostgresServer } from './postgres.js';

/*
 * One store on both kinds, for the contract suites that ask an SQLite adapter and its PostgreSQL
 * counterpart the same questions (docs/plans/store-port.md, step 7).
 */

/**
 * Copies a SQLite store (with its -wal and -shm) into `dir` as store.db: the test server or temporary
 * folder that wrote it goes with its test, the copy stays for the tests after it.
 */
export function keepStore(written: string, dir: string): string {
  const dbPath = join(dir, 'store.db');
  for (const suffix of ['', '-wal', '-shm'])
    if (existsSync(written + suffix)) copyFileSync(written + suffix, dbPath + suffix);
  return dbPath;
}

/** A new database of `server` holding what `dbPath` holds (copyStore's tables); its URL. */
export async function copiedToPostgres(dbPath: string, server: PostgresServer): Promise<string> {
  const url = freshDatabase(server);
  await copyStore({ from: dbPath, to: url });
  return url;
}

export interface StorePair {
  /** Read-only: a trace context would record its writer's start in `system`, which PostgreSQL lacks. */
  readonly db: Db;
  readonly pool: pg.Pool;
  close(): Promise<void>;
}

/** The SQLite store at `dbPath` and its PostgreSQL copy at `url`, open for reading. */
export function openPair(dbPath: string, url: string): StorePair {
  const db = openDatabase(dbPath, { readonly: true });
  const pool = postgresPool(url, 'serve', 4);
  return {
    db,
    pool,
    async close() {
      db.close();
      await pool.end();
    },
  };
}

/** Stored ids, and ids between and around them: before the first, after the last, just past each. */
export function pointsOf(ids: readonly string[]): string[] {
  return ['', 'evt_', ...ids, ...ids.map((id) => `${id}0`), `${ids.at(-1) ?? 'evt_'}~`];
}

/**
 * A second row for the newest tool call, as a provider that repeats tool_use ids across messages
 * (`call_1` in each) leaves them: same id, session and turn, a later message, another outcome. Which
 * of the two rows a read answers is where two adapters can differ. Returns the repeated id.
 */
export function repeatToolUseId(db: Db): string {
  const { row_id, id } = db
    .prepare('SELECT row_id, id FROM tool_calls ORDER BY row_id DESC LIMIT 1')
    .get() as {
    row_id: number;
    id: string;
  };
  db.prepare(
    `INSERT INTO tool_calls (id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
                             error_class, created_at_us, updated_at_us)
     SELECT id, session_id, turn_id, coalesce(message_id, 'msg') || '_again', tool_name, input_json, 'failed',
            '"again"', 'repeated', created_at_us + 1, updated_at_us + 1 FROM tool_calls WHERE row_id = ?`,
  ).run(row_id);
  return id;
}
