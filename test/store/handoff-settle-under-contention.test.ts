import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import Database from 'better-sqlite3';
import type { Logger } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Db } from '../../src/core/store/database.js';
import { pendingHandoffs } from '../../src/core/store/handoff-queue.js';
import { drainHandoffs, watchHandoffs } from '../../src/core/store/owner-handoffs.js';
import { reportGaps, type TraceContext } from '../../src/core/store/trace-context.js';
import { turnStarted } from '../helpers/events.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * Issue 12 follow-up: a handed-off event is emitted and stored first, then its handoff is settled.
 * When another process took the write lock in between (back-to-back prune batches beside a server
 * whose busy timeout is 5 ms), the settle failed, the next drain emitted the same handoff again, and
 * `trace.swept` (an audit event) or `bus.gap_detected` was stored two or three times.
 */

const DRIVER = createRequire(import.meta.url).resolve('better-sqlite3');
/** The server's busy timeout once it listens (DESIGN.md: short, the loop must not sleep in SQLite). */
const SERVER_BUSY_TIMEOUT_MS = 5;

function sweptPayload(n: number): Record<string, unknown> {
  return {
    rows_deleted: n,
    rows_audit_exempt: 0,
    cutoff_timestamp: '2026-01-01T00:00:00.000000Z',
    oldest_kept_timestamp: null,
    dry_run: false,
    swept_at: `2026-01-01T00:00:${String(n).padStart(2, '0')}.000000Z`,
  };
}

/** A second connection, as a prune beside the server opens one; closed at the end of the test. */
function secondConnection(dbPath: string): Db {
  const db = new Database(dbPath) as unknown as Db;
  db.pragma('busy_timeout = 10000');
  onTestFinished(() => {
    db.close();
  });
  return db;
}

/** What a prune does beside a server: the handoff row is committed by another connection. */
function handOffFrom(db: Db, sessionId: string, type: string, payload: Record<string, unknown>): void {
  db.prepare(
    'INSERT INTO owner_handoffs (session_id, type, payload_json, created_at_us) VALUES (?, ?, ?, 0)',
  ).run(sessionId, type, JSON.stringify(payload));
}

/** How many times each stored event of `type` was stored, by a payload field that names it. */
function storedCounts(context: TraceContext, type: string, field: string): Record<string, number> {
  const rows = context.db
    .prepare(
      `SELECT json_extract(payload_json, '$.${field}') AS k, count(*) AS n FROM events WHERE type = ? GROUP BY k`,
    )
    .all(type) as { k: string | number; n: number }[];
  return Object.fromEntries(rows.map((r) => [String(r.k), r.n]));
}

async function until(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('handed-off events are stored once while another connection takes the write lock', () => {
  it('a lock taken right after the handed-off events commit does not make the watcher emit them again', async () => {
    const owner = tempTraceContext();
    owner.db.pragma(`busy_timeout = ${SERVER_BUSY_TIMEOUT_MS}`);
    const other = secondConnection(owner.dbPath);
    other.exec("INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES ('s', 0, 0)");
    // The other connection grabs the write lock the moment the owner stored a handed-off event, and
    // holds it for 60 ms: the gap between "event stored" and "handoff settled" the bug lived in.
    let grabbed = false;
    owner.writer.onCommit((events) => {
      if (grabbed || !events.some((e) => e.type === 'trace.swept')) return;
      grabbed = true;
      other.exec('BEGIN IMMEDIATE');
      setTimeout(() => other.exec('COMMIT'), 60);
    });
    watchHandoffs(owner, { intervalMs: 5 });
    handOffFrom(other, 's', 'bus.gap_detected', {
      session_id: 's',
      gap_start_id: 'evt_before_hole',
      gap_end_id: 'evt_after_hole',
      estimated_missing_count: 2,
      detected_at: '2026-01-01T00:00:00.000000Z',
    });
    handOffFrom(other, 'system', 'trace.swept', sweptPayload(1));

    await until(() => grabbed && !other.inTransaction && pendingHandoffs(owner.db).length === 0, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 100)); // a few more watcher ticks
    await owner.flush();
    expect(storedCounts(owner, 'trace.swept', 'swept_at')).toEqual({ '2026-01-01T00:00:01.000000Z': 1 });
    expect(storedCounts(owner, 'bus.gap_detected', 'gap_start_id')).toEqual({ evt_before_hole: 1 });
    // The gap is recorded as reported, so the owner's next scan does not report it again.
    expect(owner.db.prepare('SELECT count(*) FROM reported_gaps').pluck().get()).toBe(1);
    expect(await reportGaps(owner)).toEqual([]);
  });

  it('a drain while the previous one waits for the store does not emit its handoffs a second time', async () => {
    const owner = tempTraceContext();
    owner.db.pragma(`busy_timeout = ${SERVER_BUSY_TIMEOUT_MS}`);
    const other = secondConnection(owner.dbPath);
    handOffFrom(other, 'system', 'trace.swept', sweptPayload(7));
    const holder = await holdWriteLockInChild(owner.dbPath, 400);
    // Both drains emit while the writer waits out the child's lock: nothing is stored or settled yet.
    const [first, second] = await Promise.all([drainHandoffs(owner), drainHandoffs(owner)]);
    await holder.released;
    await owner.flush();
    expect([...first, ...second].map((h) => h.payload.rows_deleted)).toEqual([7]);
    expect(storedCounts(owner, 'trace.swept', 'rows_deleted')).toEqual({ '7': 1 });
    expect(pendingHandoffs(owner.db)).toEqual([]);
  });

  it('a handed-off event the writer dropped during an outage keeps its handoff for the next drain (at least once)', async () => {
    // A buffer of zero events while storage is unavailable: the handed-off event is dropped, the
    // settle (a row write, never dropped) still commits behind it and must find no event to settle.
    const owner = tempTraceContext({ writerBuffer: { maxEvents: 0 } });
    owner.db.pragma(`busy_timeout = ${SERVER_BUSY_TIMEOUT_MS}`);
    handOffFrom(secondConnection(owner.dbPath), 'system', 'trace.swept', sweptPayload(3));
    const holder = await holdWriteLockInChild(owner.dbPath, 300);
    owner.bus.emit(turnStarted('s')); // the writer fails on the lock and starts waiting
    await owner.bus.flush();
    expect(owner.writer.failure).toBe('busy');
    const during = drainHandoffs(owner);
    await holder.released;
    expect(await during).toEqual([]);
    expect(storedCounts(owner, 'trace.swept', 'rows_deleted')).toEqual({});
    expect(pendingHandoffs(owner.db)).toHaveLength(1);
    expect((await drainHandoffs(owner)).map((h) => h.payload.rows_deleted)).toEqual([3]);
    expect(storedCounts(owner, 'trace.swept', 'rows_deleted')).toEqual({ '3': 1 });
    expect(pendingHandoffs(owner.db)).toEqual([]);
  });

  it('with another process taking the write lock in 15 ms bursts, each handed-off trace.swept is stored once', async () => {
    const owner = tempTraceContext();
    owner.db.pragma(`busy_timeout = ${SERVER_BUSY_TIMEOUT_MS}`);
    const warnings: string[] = [];
    const logger = {
      warn: (o: { err?: string }, m: string) => warnings.push(`${m}: ${o.err}`),
      error: () => {},
      info: () => {},
      debug: () => {},
    } as unknown as Logger;
    watchHandoffs(owner, { intervalMs: 10, logger });
    // Back-to-back prune batches: hold the lock 15 ms, let go for 1 ms, until told to stop.
    const bursts = spawn(
      process.execPath,
      [
        '-e',
        `const D = require(process.argv[1]); const db = new D(process.argv[2]); db.pragma('busy_timeout = 30000');
         let stop = false; process.stdin.on('data', () => { stop = true; });
         const pause = new Int32Array(new SharedArrayBuffer(4));
         const burst = () => {
           if (stop) { db.close(); process.exit(0); }
           for (let i = 0; i < 20; i += 1) {
             db.exec('BEGIN IMMEDIATE');
             db.prepare("UPDATE sessions SET updated_at_us = updated_at_us WHERE id = 'system'").run();
             Atomics.wait(pause, 0, 0, 15);
             db.exec('COMMIT');
             Atomics.wait(pause, 0, 0, 1);
           }
           setImmediate(burst);
         };
         burst();`,
        DRIVER,
        owner.dbPath,
      ],
      { stdio: ['pipe', 'inherit', 'inherit'] },
    );
    const exited = new Promise<void>((resolve) => bursts.once('exit', () => resolve()));
    onTestFinished(() => {
      if (bursts.exitCode === null) bursts.kill('SIGKILL');
    });
    const other = secondConnection(owner.dbPath);
    const count = 15;
    for (let n = 0; n < count; n += 1) {
      handOffFrom(other, 'system', 'trace.swept', sweptPayload(n));
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    bursts.stdin!.write('stop\n');
    await exited;
    await until(() => pendingHandoffs(owner.db).length === 0, 15_000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await owner.flush();
    const counts = storedCounts(owner, 'trace.swept', 'rows_deleted');
    expect(Object.keys(counts)).toHaveLength(count);
    expect(Object.entries(counts).filter(([, n]) => n !== 1)).toEqual([]);
    // The write lock was really contended: the owner's own writes had to wait for it.
    expect(owner.writer.stats.retries + warnings.length).toBeGreaterThan(0);
  }, 30_000);
});
