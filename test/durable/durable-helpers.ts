import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { onTestFinished } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { tempDir } from '../helpers/tmp.js';

/** A data folder with a config: tools allowed, `slow:` streaming 150 × 20 ms = 3 s. */
export function durableProject(runtime: Record<string, unknown> = {}, server: Record<string, unknown> = {}) {
  const home = tempDir();
  const dbPath = join(home, 'metis.db');
  const configPath = join(home, 'metis.config.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      server,
      runtime: {
        tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
        scripted: { token_delay_ms: 1, slow_token_delay_ms: 20, slow_tokens: 150 },
        ...runtime,
      },
    }),
  );
  return { home, dbPath, args: ['--db', dbPath, '--config', configPath] };
}

export async function post(url: string, path: string, body: unknown): Promise<{ status: number; body: any }> {
  return jsonRequest(url, 'POST', path, body);
}

export interface StoredRow {
  id: string;
  type: string;
  parent_event_id: string | null;
  payload: Record<string, any>;
}

type Query = <T>(sql: string, ...params: unknown[]) => T[];

/** A read-only view of the database, queried afresh each call. */
export function storeReader(dbPath: string) {
  const db = new Database(dbPath, { readonly: true });
  onTestFinished(() => {
    db.close();
  });
  return readerOver(<T>(sql: string, ...params: unknown[]) => db.prepare(sql).all(...params) as T[]);
}

/** A string as an SQL literal: test ids and types only, never input from outside. */
const literal = (value: unknown) =>
  typeof value === 'number' ? String(value) : `'${String(value).replaceAll("'", "''")}'`;

/**
 * The same view of a PostgreSQL store (a server on PostgreSQL alone has no file to read), through psql
 * as its superuser: `?` placeholders are filled in as literals, rows come back as JSON.
 */
export function postgresStoreReader(psql: (sql: string, database: string) => string, url: string) {
  const database = new URL(url).pathname.slice(1);
  return readerOver(<T>(sql: string, ...params: unknown[]) => {
    let next = 0;
    const bound = sql.replace(/\?/g, () => literal(params[next++]));
    return JSON.parse(psql(`SELECT coalesce(json_agg(t), '[]') FROM (${bound}) t`, database).trim()) as T[];
  });
}

/** What a test reads of a store, whichever it is. */
export type StoreReader = ReturnType<typeof readerOver>;

function readerOver(query: Query) {
  return {
    query,
    /** The turn's events in id order. */
    turn(turnId: string): StoredRow[] {
      return query<{ id: string; type: string; parent_event_id: string | null; payload_json: string }>(
        'SELECT id, type, parent_event_id, payload_json FROM events WHERE turn_id = ? ORDER BY id',
        turnId,
      ).map(({ payload_json, ...row }) => ({ ...row, payload: JSON.parse(payload_json) }));
    },
    ended(turnId: string): boolean {
      return this.turn(turnId).some((e) => e.type === 'turn.completed' || e.type === 'turn.cancelled');
    },
    /** Whether the session's seq runs 1..n, no hole, no duplicate. */
    seqWhole(sessionId: string): boolean {
      const seqs = query<{ seq: number }>(
        'SELECT seq FROM events WHERE session_id = ? ORDER BY seq',
        sessionId,
      ).map((r) => r.seq);
      return seqs.every((seq, i) => seq === i + 1);
    },
  };
}

/** True off Linux, saying so: these tests read /proc and send POSIX signals to real servers. */
export function notLinux(file: string): boolean {
  const skip = process.platform !== 'linux';
  if (skip) console.log(`${file}: skipped on ${process.platform} (needs Linux: /proc and POSIX signals)`);
  return skip;
}
