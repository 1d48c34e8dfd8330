import { describe, expect, it } from 'vitest';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { newEventId } from '../../src/core/events/ids.js';
import { SqliteStreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
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

  it('sessions the store names only after the first flush are pruned at the next one', async () => {
    const context = tempTraceContext();
    const window = { minAgeMs: 0, minEvents: 2, pruneEveryMs: 60_000 };
    const before = new StreamArchive(new SqliteStreamArchiveRows(context.db), {
      ...window,
      minAgeMs: 60_000,
    });
    for (let i = 0; i < 5; i += 1) before.record(delta('sess_old'));
    before.close();
    await context.flush();

    // A store far away: it names the archived sessions once the new process has flushed (and pruned) once.
    const rows = new SqliteStreamArchiveRows(context.db);
    let name!: () => void;
    const named = new Promise<void>((resolve) => {
      name = resolve;
    });
    const after = new StreamArchive(
      {
        archivedSessions: async () => {
          await named;
          return rows.archivedSessions();
        },
        write: (batch, settled) => rows.write(batch, settled),
        after: (sessionId, afterId, limit) => rows.after(sessionId, afterId, limit),
        horizon: (sessionId) => rows.horizon(sessionId),
        prune: (sessionIds, cutoffUs, keep) => rows.prune(sessionIds, cutoffUs, keep),
      },
      window,
    );
    const oldRows = () => archivedRows(context, 'sess_old');
    after.record(delta('sess_live'));
    await settle();
    await context.flush();
    expect(oldRows()).toBe(5);
    name();
    await named;
    after.record(delta('sess_live'));
    await settle();
    after.close();
    await context.flush();
    expect(oldRows()).toBe(2);
  });
});

/** How many streaming events of the session the archive's table holds. */
function archivedRows(context: TraceContext, sessionId: string): number {
  return context.db
    .prepare('SELECT count(*) FROM stream_events WHERE session_id = ?')
    .pluck()
    .get(sessionId) as number;
}
