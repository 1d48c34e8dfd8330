import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { SqliteBudgetRows } from '../../src/core/store/budget-rows.js';
import type { Db } from '../../src/core/store/database.js';
import { pendingHandoffs } from '../../src/core/store/handoff-queue.js';
import { drainHandoffs } from '../../src/core/store/owner-handoffs.js';
import { type NewOutcome, SqlitePatternRows } from '../../src/core/store/pattern-rows.js';
import { SessionStore } from '../../src/core/store/session-store.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * Row writes are data (store-port plan step 1): each `RowChange` queued on the trace writer is applied
 * by the connection's SqliteRowApplier. These are the kinds no other test reads back after the writer
 * committed them, and the two places where applying late could differ from running a closure.
 */

/** The server's busy timeout on the loop: the writer waits a lock out off the loop, never in SQLite. */
const LOOP_BUSY_TIMEOUT_MS = 5;

function outcome(n: number, atUs: number): NewOutcome {
  return {
    fingerprintId: `fp_${n}`,
    key: `key_${n}`,
    featuresJson: '{}',
    model: 'scripted:a',
    sessionId: 'sess_p',
    score: 0.5,
    costUsd: 0.01,
    turns: 1,
    atUs,
  };
}

function createSession(sessions: SessionStore, id: string): void {
  sessions.createSession({ id, workspace_path: '/tmp/ws', workspace_hash: 'h', active_model: null });
}

describe('row changes applied by the trace writer', () => {
  it('pattern trims, evictions and clears delete what they name, and the fingerprints left empty', async () => {
    const context = tempTraceContext();
    const rows = new SqlitePatternRows(context.db);
    const stored = () => {
      const { fingerprints, outcomes } = rows.load();
      return { fingerprints: fingerprints.map((f) => f.id), recorded: outcomes.map((o) => o.recorded_at_us) };
    };
    for (const n of [1, 2, 3, 4]) rows.insertOutcome(outcome(n, n * 1000));
    rows.deleteRecordedBefore(2000);
    await context.flush();
    expect(stored()).toEqual({ fingerprints: ['fp_2', 'fp_3', 'fp_4'], recorded: [2000, 3000, 4000] });
    rows.deleteOldest(2);
    await context.flush();
    expect(stored()).toEqual({ fingerprints: ['fp_4'], recorded: [4000] });
    rows.deleteAll();
    await context.flush();
    expect(stored()).toEqual({ fingerprints: [], recorded: [] });
  });

  it('a sticky model is the active one from then on', async () => {
    const context = tempTraceContext();
    const sessions = new SessionStore(context.db);
    createSession(sessions, 'sess_s');
    sessions.setStickyModel('sess_s', 'scripted:pinned');
    await context.flush();
    expect(sessions.getSession('sess_s')).toMatchObject({
      active_model: 'scripted:pinned',
      sticky_model: 'scripted:pinned',
    });
  });

  it('spends queued while storage is locked add to what is stored when they are applied', async () => {
    const context = tempTraceContext();
    context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
    const budgets = new SqliteBudgetRows(context.db);
    createSession(new SessionStore(context.db), 'sess_b');
    budgets.addSpend('sess_b', { usd: 0.25, tokens: 100 });
    await context.flush();
    // Another connection (a second node's copy, a tool) holds the lock and adds its own spend before
    // the queued ones are applied: a change carrying a total computed at write time would undo it.
    const other = new Database(context.dbPath) as unknown as Db;
    onTestFinished(() => {
      other.close();
    });
    other.exec('BEGIN IMMEDIATE');
    budgets.addSpend('sess_b', { usd: 0.5, tokens: 20 });
    budgets.addSpend('sess_b', { usd: 0.125, tokens: 3 });
    expect(context.writer.failure).toBe('busy');
    other
      .prepare(
        "UPDATE sessions SET spent_usd = spent_usd + 1, spent_tokens = spent_tokens + 1000 WHERE id = 'sess_b'",
      )
      .run();
    other.exec('COMMIT');
    await context.flush();
    expect(budgets.spentBy('sess_b')).toEqual({ usd: 1.875, tokens: 1123 });
  });

  it('a handoff settle reports what it settled when a refused row beside it makes the batch run again', async () => {
    const context = tempTraceContext();
    context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
    const sessions = new SessionStore(context.db);
    createSession(sessions, 'sess_h');
    context.db
      .prepare(
        "INSERT INTO owner_handoffs (session_id, type, payload_json, created_at_us) VALUES ('system', 'trace.swept', ?, 0)",
      )
      .run(
        JSON.stringify({
          rows_deleted: 5,
          rows_audit_exempt: 0,
          cutoff_timestamp: '2026-01-01T00:00:00.000000Z',
          oldest_kept_timestamp: null,
          dry_run: false,
          swept_at: '2026-01-01T00:00:05.000000Z',
        }),
      );
    await context.flush();
    const lock = await holdWriteLockInChild(context.dbPath, 60_000);
    const call = (path: string) => ({
      id: 'call_twice',
      session_id: 'sess_h',
      turn_id: 'turn_1',
      message_id: 'msg_1',
      tool_name: 'read_file',
      input: { path },
      status: 'pending' as const,
    });
    // One transaction once the lock goes: the second call is refused, so every item runs again alone.
    sessions.saveToolCall(call('a'));
    sessions.saveToolCall(call('b'));
    const drained = drainHandoffs(context);
    await lock.release();
    expect((await drained).map((h) => h.payload.rows_deleted)).toEqual([5]);
    expect(pendingHandoffs(context.db)).toEqual([]);
    expect(context.writer.stats.rejectedRows).toBe(1);
    expect(sessions.toolCall('call_twice')?.input).toEqual({ path: 'a' });
  });
});
