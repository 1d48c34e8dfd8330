import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isMetisError } from '../../src/core/errors.js';
import { openDatabase } from '../../src/core/store/database.js';
import { handOff, pendingHandoffs } from '../../src/core/store/handoff-queue.js';
import { acquireLock, lockOwner } from '../../src/core/store/lock.js';
import { drainHandoffs } from '../../src/core/store/owner-handoffs.js';
import { PRUNE_LOCK_PURPOSE, purgeOldEvents } from '../../src/core/store/retention.js';
import { reportGaps } from '../../src/core/store/trace-context.js';
import { turnStarted } from '../helpers/events.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

function seqsOf(dbPath: string, sessionId: string): number[] {
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return db
      .prepare('SELECT seq FROM events WHERE session_id = ? ORDER BY seq')
      .pluck()
      .all(sessionId) as number[];
  } finally {
    db.close();
  }
}

describe('owner handoffs: only the owner of a session writes into it (issue 12)', () => {
  it('a hole inside the rows a prune deletes beside the owner is reported once, by the owner, exactly', async () => {
    const owner = tempTraceContext();
    const dbPath = owner.dbPath;
    // Seq 1, 2, 3 and 5 of an old session; 4 was lost. No scan has read any of it yet.
    const ids = insertOldEvents(owner.db, { sessionId: 's', ageDays: 200, count: 4 });
    owner.db.prepare("UPDATE events SET seq = 5 WHERE session_id = 's' AND id = ?").run(ids[3]);
    owner.bus.emit(turnStarted('s'));
    await owner.flush();
    const release = acquireLock(dbPath); // this process stands for the live server
    try {
      const result = await purgeOldEvents({ dbPath, days: 90 });
      expect(result).toMatchObject({ rows_deleted: 4, handed_to_server_pid: process.pid });
      // The prune wrote no event: its findings wait for the owner.
      expect(owner.store.sessionEvents('s').map((e) => e.type)).toEqual(['turn.started']);
      expect(pendingHandoffs(owner.db).map((h) => h.type)).toEqual(['bus.gap_detected', 'trace.swept']);

      const drained = await drainHandoffs(owner);
      expect(drained.map((h) => h.type)).toEqual(['bus.gap_detected', 'trace.swept']);
      const gaps = owner.store.sessionEvents('s').filter((e) => e.type === 'bus.gap_detected');
      expect(gaps.map((e) => e.payload)).toEqual([
        expect.objectContaining({ gap_start_id: ids[2], gap_end_id: ids[3], estimated_missing_count: 1 }),
      ]);
      // A later scan by the owner finds nothing new: reported exactly once.
      expect(await reportGaps(owner)).toEqual([]);
      expect(owner.store.sessionEvents('s').filter((e) => e.type === 'bus.gap_detected')).toHaveLength(1);
      expect(pendingHandoffs(owner.db)).toEqual([]);
    } finally {
      release();
    }
    await owner.close();
    // Seq 1-5 of the old rows are gone; the owner's events follow without a hole or a duplicate.
    expect(seqsOf(dbPath, 's')).toEqual([6, 7]);
  });

  it('a prune that owns the database records what a server that stopped was handed and never drained', async () => {
    const context = tempTraceContext();
    const dbPath = context.dbPath;
    handOff(context.db, 'system', 'trace.swept', {
      rows_deleted: 3,
      rows_audit_exempt: 0,
      cutoff_timestamp: '2026-01-01T00:00:00.000000Z',
      oldest_kept_timestamp: null,
      dry_run: false,
      swept_at: '2026-01-01T00:00:01.000000Z',
    });
    await context.close();
    const result = await purgeOldEvents({ dbPath, days: 90 });
    expect(result.handed_to_server_pid).toBeNull();
    const db = openDatabase(dbPath, { readonly: true });
    try {
      const swept = db
        .prepare("SELECT payload_json FROM events WHERE type = 'trace.swept' ORDER BY seq")
        .pluck()
        .all()
        .map((p) => JSON.parse(p as string).rows_deleted);
      expect(swept).toEqual([3, 0]);
      expect(db.prepare('SELECT count(*) FROM owner_handoffs').pluck().get()).toBe(0);
    } finally {
      db.close();
    }
  });

  it('a prune that owns the database holds its lock: a server cannot start meanwhile, and is told why', async () => {
    const context = tempTraceContext();
    insertOldEvents(context.db, { sessionId: 'sess_old', ageDays: 200, count: 20 });
    await context.close();
    const refusals: string[] = [];
    await purgeOldEvents({
      dbPath: context.dbPath,
      batchSize: 5,
      onProgress: () => {
        try {
          acquireLock(context.dbPath)(); // what `metis serve` does first
          refusals.push('taken');
        } catch (error) {
          refusals.push(isMetisError(error) ? `${error.code}: ${error.message}` : String(error));
        }
      },
    });
    expect(refusals.length).toBeGreaterThan(1);
    for (const refusal of refusals) {
      expect(refusal).toBe(
        `METIS_ERR_DB_LOCKED: ${context.dbPath} is in use by another metis process (pid ${process.pid}, ${PRUNE_LOCK_PURPOSE})`,
      );
    }
    expect(lockOwner(context.dbPath)).toBeNull(); // released at the end
  });

  it('a prune refuses to run beside a restore (or another prune) and changes nothing', async () => {
    const context = tempTraceContext();
    insertOldEvents(context.db, { sessionId: 'sess_old', ageDays: 200, count: 3 });
    await context.close();
    const release = acquireLock(context.dbPath, 'metis restore');
    try {
      const error = await purgeOldEvents({ dbPath: context.dbPath }).catch((e: unknown) => e);
      expect(isMetisError(error) && error.code).toBe('METIS_ERR_DB_LOCKED');
      expect((error as Error).message).toMatch(
        new RegExp(`\\(pid ${process.pid}, metis restore\\); run the prune when it has finished$`),
      );
    } finally {
      release();
    }
    expect(seqsOf(context.dbPath, 'sess_old')).toEqual([1, 2, 3]);
  });

  it('every trace context records its writer’s registration and unregistration in `system`', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    for (let i = 0; i < 3; i += 1) await tempTraceContext({ dbPath }).close();
    const db = openDatabase(dbPath, { readonly: true });
    try {
      const system = db
        .prepare("SELECT seq, type, payload_json FROM events WHERE session_id = 'system' ORDER BY seq")
        .all() as { seq: number; type: string; payload_json: string }[];
      expect(system.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(system.map((r) => [r.type, JSON.parse(r.payload_json)])).toEqual(
        Array.from({ length: 3 }, () => [
          ['bus.subscriber_registered', expect.objectContaining({ subscription_name: 'trace-store-writer' })],
          ['bus.subscriber_unregistered', { subscription_name: 'trace-store-writer', reason: 'shutdown' }],
        ]).flat(),
      );
    } finally {
      db.close();
    }
  });

  it('a handed-off row the catalog rejects is discarded, so it cannot keep the owner from starting', async () => {
    const context = tempTraceContext(); // strict validation
    handOff(context.db, 'system', 'trace.swept', { rows_deleted: 'many' });
    expect(await reportGaps(context)).toEqual([]);
    expect(pendingHandoffs(context.db)).toEqual([]);
    expect(context.store.sessionEvents('system').map((e) => e.type)).toEqual(['bus.subscriber_registered']);
  });
});
