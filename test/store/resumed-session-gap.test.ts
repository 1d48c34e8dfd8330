import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { openTraceContext, reportGaps, type TraceContext } from '../../src/core/store/trace-context.js';
import { turnStarted } from '../helpers/events.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/**
 * The trace writer's live drop report and the startup gap scan must name a hole with the same
 * (session_id, gap_start_id) key, or the hole is reported twice. The writer only sees the events of
 * its own process, so a session resumed from an earlier run is where the two could disagree: its
 * last persisted event before the hole was stored by another process.
 */

/** The server's busy timeout on the loop (database.ts LOOP_BUSY_TIMEOUT_MS). */
const LOOP_BUSY_TIMEOUT = 5;
const tick = () => new Promise((resolve) => setImmediate(resolve));

function gapEvents(context: TraceContext, sessionId: string): MetisEvent[] {
  return context.store.sessionEvents(sessionId).filter((e) => e.type === 'bus.gap_detected');
}

/**
 * Fills a 5-event buffer with events of another session while a second process holds the write
 * lock, then emits `count` events of `sessionId`, which overflow and are dropped; storage comes back.
 */
async function dropDuringOutage(
  context: TraceContext,
  sessionId: string,
  count: number,
): Promise<MetisEvent[]> {
  context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT}`);
  const lock = await holdWriteLockInChild(context.dbPath, 60_000);
  for (let i = 0; i < 5; i += 1) {
    context.bus.emit(turnStarted('filler', null, `turn_${i}`));
    // One tick each: the first meets the lock, the next four wait with it.
    await tick();
  }
  const dropped: MetisEvent[] = [];
  for (let i = 0; i < count; i += 1) {
    dropped.push(context.bus.emit(turnStarted(sessionId, null, `dropped_${i}`))!);
    await tick();
  }
  expect(context.writer.stats.droppedEvents).toBe(count);
  await lock.release();
  await context.flush();
  await new Promise((resolve) => setTimeout(resolve, 50));
  await context.flush();
  return dropped;
}

describe('a dropped run at the start of a session this process did not begin', () => {
  it('is reported once, live, keyed by the last event an earlier process stored; the restart scan stays quiet', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    // Run 1 stores the session's first three events.
    const first = openTraceContext({ dbPath, validation: 'strict' });
    const earlier = [0, 1, 2].map((i) => first.bus.emit(turnStarted('resumed', null, `turn_${i}`))!);
    await first.flush();
    await first.close();

    // Run 2 resumes the session; its first events in this process are dropped during an outage.
    const second = openTraceContext({ dbPath, validation: 'strict', writerBuffer: { maxEvents: 5 } });
    expect(await reportGaps(second)).toEqual([]);
    await second.flush();
    const dropped = await dropDuringOutage(second, 'resumed', 3);
    expect(dropped.map((e) => e.seq)).toEqual([4, 5, 6]);
    const later = second.bus.emit(turnStarted('resumed', null, 'turn_after'))!;
    await second.flush();

    expect(later.seq).toBe(8);
    const [live] = gapEvents(second, 'resumed');
    await second.close();

    // Run 3: the startup scan finds the seq hole 3 → 7 and knows it was reported.
    const third = openTraceContext({ dbPath, validation: 'strict' });
    try {
      const rescanned = await reportGaps(third);
      expect(gapEvents(third, 'resumed').map((e) => e.payload)).toEqual([live!.payload]);
      expect(rescanned).toEqual([]);
      // Bus spec §6.10: the last persisted event before the gap, the first persisted one after it.
      // Nothing was stored after the hole before the report, so the report itself is that event.
      expect(live!.seq).toBe(7);
      expect(live!.payload).toMatchObject({
        session_id: 'resumed',
        gap_start_id: earlier[2]!.id,
        gap_end_id: live!.id,
        estimated_missing_count: 3,
      });
      const rows = third.db
        .prepare('SELECT gap_start_id, gap_end_id, missing_count FROM reported_gaps WHERE session_id = ?')
        .all('resumed');
      expect(rows).toEqual([{ gap_start_id: earlier[2]!.id, gap_end_id: live!.id, missing_count: 3 }]);
    } finally {
      await third.close();
    }
  }, 30_000);

  it('closes the run with the first event stored after it when one was kept before the report', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const first = openTraceContext({ dbPath, validation: 'strict' });
    const earlier = first.bus.emit(turnStarted('resumed', null, 'turn_0'))!;
    await first.flush();
    await first.close();

    // A byte bound (a turn.started row counts about 400 bytes): a large event overflows it, a small one
    // after it still fits, so the run is closed by a kept event while storage is still out.
    const second = tempTraceContext({ dbPath, writerBuffer: { maxBytes: 1300 } });
    await second.flush();
    second.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT}`);
    const lock = await holdWriteLockInChild(dbPath, 60_000);
    for (let i = 0; i < 2; i += 1) {
      second.bus.emit(turnStarted('filler', null, `turn_${i}`));
      await tick();
    }
    const dropped = second.bus.emit(turnStarted('resumed', 'x'.repeat(2000), 'dropped'))!;
    await tick();
    const after = second.bus.emit(turnStarted('resumed', null, 'after'))!;
    await tick();
    expect(second.writer.stats.droppedEvents).toBe(1);
    await lock.release();
    await second.flush();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await second.flush();

    expect([earlier.seq, dropped.seq, after.seq]).toEqual([1, 2, 3]);
    const live = gapEvents(second, 'resumed');
    expect(live).toHaveLength(1);
    expect(live[0]!.payload).toMatchObject({
      gap_start_id: earlier.id,
      gap_end_id: after.id,
      estimated_missing_count: 1,
    });
    expect(await reportGaps(second)).toEqual([]);
  }, 30_000);

  it('with nothing stored before the run, is reported once live and never by a later scan', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const second = openTraceContext({ dbPath, validation: 'strict', writerBuffer: { maxEvents: 5 } });
    await second.flush();
    const dropped = await dropDuringOutage(second, 'fresh', 2);
    expect(dropped.map((e) => e.seq)).toEqual([1, 2]);
    second.bus.emit(turnStarted('fresh', null, 'turn_after'));
    await second.flush();
    const live = gapEvents(second, 'fresh');
    expect(live).toHaveLength(1);
    // No persisted event precedes the hole: the report names the first dropped one (see drop-ledger.ts).
    expect(live[0]!.payload).toMatchObject({ gap_start_id: dropped[0]!.id, estimated_missing_count: 2 });
    await second.close();

    const third = openTraceContext({ dbPath, validation: 'strict' });
    try {
      expect(await reportGaps(third)).toEqual([]);
      expect(gapEvents(third, 'fresh')).toHaveLength(1);
    } finally {
      await third.close();
    }
  }, 30_000);
});
