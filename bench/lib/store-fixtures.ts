/**
 * Fixtures for bench/store.ts: the benchmark's event shape, temp folders, the spec's §7.1 table layout
 * used as a baseline, and a fast bulk loader that writes identical synthetic rows into several stores.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { monotonicFactory } from 'ulid';
import type { EmitInput } from '../../src/core/bus/event-bus.js';
import type { PayloadOf } from '../../src/core/events/catalog/index.js';
import type { Db } from '../../src/core/store/database.js';

/** The event type every store figure writes: a model call's usage, ~300 bytes of JSON. */
export const BENCH_EVENT_TYPE = 'llm.call_completed' as const;
const BENCH_ACTOR = 'agent';
const BENCH_SENSITIVITY = 'pseudonymous';

/** A realistic `llm.call_completed` payload: its required fields, ~305 bytes of JSON. */
export function benchPayload(i: number): PayloadOf<typeof BENCH_EVENT_TYPE> {
  return {
    model: 'claude-sonnet-4-5-20250929',
    provider: 'anthropic',
    input_tokens: 18_000 + (i % 4096),
    output_tokens: 1_000 + (i % 997),
    cached_input_tokens: 12_288,
    cache_creation_input_tokens: 0,
    cost_usd: 0.0731,
    pricing_version: '2025-09-01',
    latency_ms: 4_000 + (i % 1_000),
    stop_reason: 'end_turn',
    produced_tool_calls: i % 3,
    produced_thinking_blocks: 0,
  };
}

export function benchSessionId(k: number): string {
  return `sess_bench_${String(k).padStart(4, '0')}`;
}

/** The emit input of the i-th benchmark event in a session, chained to the previous one. */
export function benchInput(i: number, sessionId: string, parentId: string | null): EmitInput {
  return {
    type: BENCH_EVENT_TYPE,
    session_id: sessionId,
    turn_id: `turn_bench_${sessionId.slice(-4)}_${Math.floor(i / 20)}`,
    parent_event_id: parentId,
    payload: benchPayload(i),
  };
}

/** A fresh temp folder for one figure's files. */
export function tempStoreDir(): string {
  return mkdtempSync(join(tmpdir(), 'metis-bench-store-'));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** The column list every insert here uses (the trace writer's order). */
export const INSERT_COLUMNS =
  'session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json';

export const INSERT_SQL = `INSERT INTO events (${INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/**
 * The spec's §7.1 layout (a rowid table keyed by `id` plus its four indexes, and `seq`), with the
 * pragmas openDatabase sets: the baseline the clustered layout is compared with.
 */
export function openSpecLayoutDb(path: string): Db {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  db.exec(`
    CREATE TABLE IF NOT EXISTS sessions (
      id TEXT PRIMARY KEY,
      created_at_us INTEGER NOT NULL,
      updated_at_us INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS events (
      id TEXT PRIMARY KEY,
      timestamp_us INTEGER NOT NULL,
      session_id TEXT NOT NULL,
      turn_id TEXT,
      parent_event_id TEXT,
      type TEXT NOT NULL,
      actor TEXT NOT NULL,
      sensitivity TEXT NOT NULL,
      payload_json TEXT NOT NULL,
      seq INTEGER NOT NULL,
      FOREIGN KEY (session_id) REFERENCES sessions(id)
    );
    CREATE INDEX IF NOT EXISTS idx_events_session_id ON events(session_id, id);
    CREATE INDEX IF NOT EXISTS idx_events_type_timestamp ON events(type, timestamp_us);
    CREATE INDEX IF NOT EXISTS idx_events_turn ON events(turn_id);
    CREATE INDEX IF NOT EXISTS idx_events_parent ON events(parent_event_id);
  `);
  return db;
}

export interface SyntheticStoreSpec {
  readonly events: number;
  readonly sessions: number;
  /** Every event is stamped this many days in the past (ids and timestamps agree). */
  readonly ageDays: number;
}

export interface SyntheticStore {
  readonly sessionIds: readonly string[];
  readonly events: number;
  /** The last event written to each session, in sessionIds order. */
  readonly last: readonly { readonly seq: number; readonly id: string }[];
  readonly lastId: string;
}

const DAY_MS = 86_400_000;
const ROWS_PER_TRANSACTION = 50_000;

/**
 * Writes the same synthetic history into every database: `events` rows interleaved round-robin over
 * `sessions` sessions in id order (as a live writer would), with ids and timestamps `ageDays` old,
 * per-session `seq` without holes, turns of 20 events and each event the parent of the next.
 *
 * Secondary indexes are dropped during the load and rebuilt after it (a sort instead of random
 * inserts), and the journal is off while loading; each file ends in WAL mode, checkpointed, fsynced.
 */
export function fillSyntheticStore(dbs: readonly Db[], spec: SyntheticStoreSpec): SyntheticStore {
  const nextUlid = monotonicFactory(Math.random); // ulid's default PRNG costs ~60 µs per new millisecond
  const baseMs = Date.now() - spec.ageDays * DAY_MS - spec.events; // ~1 event per ms, all older than ageDays
  const sessionIds = Array.from({ length: spec.sessions }, (_, k) => benchSessionId(k));
  const seqs = new Array<number>(spec.sessions).fill(0);
  const parents = new Array<string | null>(spec.sessions).fill(null);
  const payloads = Array.from({ length: 1024 }, (_, i) => JSON.stringify(benchPayload(i)));

  const prepared = dbs.map((db) => {
    db.pragma('journal_mode = OFF');
    db.pragma('synchronous = OFF');
    db.pragma('cache_size = -1048576');
    const indexes = db
      .prepare(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL",
      )
      .all() as { name: string; sql: string }[];
    for (const index of indexes) db.exec(`DROP INDEX ${index.name}`);
    const insertSession = db.prepare(
      'INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)',
    );
    db.transaction(() => {
      for (const id of sessionIds) insertSession.run(id, baseMs * 1000, baseMs * 1000);
    })();
    return { db, indexes, insert: db.prepare(INSERT_SQL) };
  });

  for (let start = 0; start < spec.events; start += ROWS_PER_TRANSACTION) {
    const end = Math.min(start + ROWS_PER_TRANSACTION, spec.events);
    for (const p of prepared) p.db.exec('BEGIN');
    for (let i = start; i < end; i += 1) {
      const k = i % spec.sessions;
      const ms = baseMs + i;
      const id = `evt_${nextUlid(ms)}`;
      seqs[k] = seqs[k]! + 1;
      const seq = seqs[k]!;
      const params = [
        sessionIds[k]!,
        id,
        seq,
        ms * 1000 + (i % 1000),
        `turn_bench_${k}_${Math.floor(seq / 20)}`,
        parents[k]!,
        BENCH_EVENT_TYPE,
        BENCH_ACTOR,
        BENCH_SENSITIVITY,
        payloads[i % payloads.length]!,
      ];
      parents[k] = id;
      for (const p of prepared) p.insert.run(params);
    }
    for (const p of prepared) p.db.exec('COMMIT');
  }

  for (const p of prepared) {
    for (const index of p.indexes) p.db.exec(index.sql);
    p.db.pragma('cache_size = -2000');
    p.db.pragma('synchronous = NORMAL');
    p.db.pragma('journal_mode = WAL');
  }
  return {
    sessionIds,
    events: spec.events,
    last: sessionIds.map((_, k) => ({ seq: seqs[k]!, id: parents[k]! })),
    lastId: parents[(spec.events - 1) % spec.sessions]!,
  };
}

/**
 * Records in a metis store that gap detection has already verified every synthetic event, as the
 * server's startup scan would have: later scans (the prune runs one) read only each session's newer rows.
 */
export function recordGapScan(db: Db, store: SyntheticStore): void {
  const saveCursor = db.prepare(
    'INSERT INTO gap_scan_state (session_id, last_seq, last_id) VALUES (?, ?, ?)',
  );
  db.transaction(() => {
    store.sessionIds.forEach((sessionId, k) => {
      saveCursor.run(sessionId, store.last[k]!.seq, store.last[k]!.id);
    });
  })();
}

/** Flushes a closed database file to disk, so dropping the page cache really drops it. */
export function fsyncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Drops the kernel's clean page cache (needs root on Linux). Returns false, without throwing, where
 * that is not possible.
 */
export function dropPageCache(): boolean {
  try {
    writeFileSync('/proc/sys/vm/drop_caches', '1\n');
    return true;
  } catch {
    return false;
  }
}

/** Bytes of a file resident in the page cache, from util-linux `fincore`; null when unavailable. */
export function residentBytes(path: string): number | null {
  try {
    const out = execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', path], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const n = Number(out.trim());
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}
