import { describe, expect, it } from 'vitest';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { newEventId } from '../../src/core/events/ids.js';
import { SqliteStreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import { StreamArchive } from '../../src/core/stream/stream-archive.js';
import { tempTraceContext } from '../helpers/tmp.js';

function delta(sessionId: string): MetisEvent {
  return {
    id: newEventId(),
    timestamp: microsToIso(nowMicros()),
    session_id: sessionId,
    turn_id: 'turn_1',
    parent_event_id: null,
    type: 'text.delta',
    actor: 'agent',
    payload: { message_id: 'msg_1', content_block_index: 0, text: 'x' },
    sensitivity: 'private',
    seq: null,
  };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 60));

describe('StreamArchive pruning', () => {
  it('after a restart, every archived session is pruned to its window, a bounded share per flush', async () => {
    const context = tempTraceContext();
    const sessions = Array.from({ length: 100 }, (_, i) => `sess_${String(i).padStart(3, '0')}`);
    const before = new StreamArchive(new SqliteStreamArchiveRows(context.db), {
      minAgeMs: 60_000,
      minEvents: 2,
      pruneEveryMs: 60_000,
    });
    for (const sessionId of sessions) for (let i = 0; i < 5; i += 1) before.record(delta(sessionId));
    before.close();
    await context.flush();
    const rowsPerSession = () =>
      context.db
        .prepare("SELECT count(*) FROM stream_events WHERE session_id != 'sess_live' GROUP BY session_id")
        .pluck()
        .all() as number[];
    expect(rowsPerSession()).toEqual(sessions.map(() => 5));

    // A new process: rows are old enough now, and every session is due, not only those it writes to.
    const after = new StreamArchive(new SqliteStreamArchiveRows(context.db), {
      minAgeMs: 0,
      minEvents: 2,
      pruneEveryMs: 60_000,
    });
    for (let flush = 0; flush < 5; flush += 1) {
      after.record(delta('sess_live'));
      await settle();
      await context.flush();
    }
    after.close();
    await context.flush();
    const counts = rowsPerSession();
    expect(counts.length).toBe(100);
    expect(counts.filter((n) => n !== 2)).toEqual([]);
    // Each pruned session remembers where its deltas start: an older cursor is refused, not shorted.
    expect(await after.missingAfter('sess_000', '')).toBe(true);
  });
});
