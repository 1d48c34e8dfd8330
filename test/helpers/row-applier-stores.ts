import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { type Db, openDatabase } from '../../src/core/store/database.js';
import { postgresClient } from '../../src/core/store/postgres/connect.js';
import { applyRowChanges } from '../../src/core/store/postgres/pg-row-applier.js';
import { migratePostgres } from '../../src/core/store/postgres/schema.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { rowApplierOf } from '../../src/core/store/sqlite-row-applier.js';

/**
 * The tables a RowChange writes, read alike from both stores: the columns both have, in an order both
 * give the same (ids are byte-ordered in both). `system`, the sentinel session SQLite creates, is left out.
 */
export const ROW_TABLES: Readonly<Record<string, string>> = {
  sessions: `SELECT id, parent_session_id, workspace_path, workspace_hash, active_model, status, disposition,
                    created_at_us, updated_at_us, sticky_model, budget_caps_json, spent_usd, spent_tokens, queue_json
               FROM sessions WHERE id <> 'system' ORDER BY id`,
  messages: `SELECT id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us
               FROM messages ORDER BY id`,
  tool_calls: `SELECT row_id, id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
                      error_class, created_at_us, updated_at_us
                 FROM tool_calls ORDER BY row_id`,
  pattern_fingerprints:
    'SELECT id, key, kind, features_json, created_at_us FROM pattern_fingerprints ORDER BY id',
  pattern_outcomes: `SELECT id, fingerprint_id, model, session_id, score, cost_usd, turns, recorded_at_us
                       FROM pattern_outcomes ORDER BY id`,
  stream_events: 'SELECT session_id, id, timestamp_us, event_json FROM stream_events ORDER BY session_id, id',
  stream_horizon: 'SELECT session_id, before_id FROM stream_horizon ORDER BY session_id',
  reported_gaps: `SELECT session_id, gap_start_id, gap_end_id, missing_count, reported_at_us
                    FROM reported_gaps ORDER BY session_id, gap_start_id`,
  session_titles: 'SELECT session_id, title, set_at_us FROM session_titles ORDER BY session_id',
};

export type Tables = Record<string, Record<string, unknown>[]>;

/** What a test lays down before its changes, in both stores (SQL both dialects read alike). */
export type Setup = readonly string[];

/** A bare session row, as the trace writer creates one for an event of a session it has no row of. */
export function bareSession(id: string, atUs = 0): string {
  return `INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('${id}', ${atUs}, ${atUs})`;
}

/**
 * A fresh SQLite store per use and one PostgreSQL database emptied between uses: creating a database
 * per property run would cost more than the runs.
 */
export class RowStores {
  private client: pg.Client | null = null;
  private readonly dir = mkdtempSync(join(tmpdir(), 'metis-row-applier-'));
  private files = 0;

  constructor(private readonly url: () => string) {}

  async postgres(): Promise<pg.Client> {
    if (this.client === null) {
      const client = postgresClient(this.url(), 'serve');
      await client.connect();
      await migratePostgres(client);
      this.client = client;
    }
    return this.client;
  }

  /** Applies `changes` to a fresh SQLite store, one change after the other in one transaction. */
  sqlite(setup: Setup, changes: readonly RowChange[]): Tables {
    this.files += 1;
    const db = openDatabase(join(this.dir, `store-${this.files}.db`), { create: true });
    try {
      for (const sql of setup) db.exec(sql);
      const applier = rowApplierOf(db);
      db.transaction(() => {
        for (const change of changes) applier.apply(change);
      })();
      return readSqlite(db);
    } finally {
      db.close();
    }
  }

  /**
   * Applies `changes` to the emptied PostgreSQL store in one transaction, in calls of the sizes
   * `chunks` gives (the rest in one call): a writer's batch boundaries fall anywhere.
   * @returns the tables, and how many statements the calls made.
   */
  async onPostgres(
    setup: Setup,
    changes: readonly RowChange[],
    chunks: readonly number[] = [],
  ): Promise<{ tables: Tables; statements: number }> {
    const client = await this.postgres();
    await client.query(`TRUNCATE ${Object.keys(ROW_TABLES).join(', ')} RESTART IDENTITY CASCADE`);
    for (const sql of setup) await client.query(sql);
    let statements = 0;
    await client.query('BEGIN');
    try {
      let at = 0;
      for (const size of [...chunks, changes.length]) {
        if (at >= changes.length) break;
        statements += (await applyRowChanges(client, changes.slice(at, at + Math.max(size, 1)))).statements;
        at += Math.max(size, 1);
      }
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    }
    const tables: Tables = {};
    for (const [table, sql] of Object.entries(ROW_TABLES)) tables[table] = (await client.query(sql)).rows;
    return { tables, statements };
  }

  async close(): Promise<void> {
    await this.client?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function readSqlite(db: Db): Tables {
  const tables: Tables = {};
  for (const [table, sql] of Object.entries(ROW_TABLES))
    tables[table] = db.prepare(sql).all() as Record<string, unknown>[];
  return tables;
}
