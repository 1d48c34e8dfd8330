import { describe, expect, it } from 'vitest';
import { TraceStore } from '../../src/core/store/trace-store.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * A planner's replay spans its worker sessions (streaming §3.6, include_worker_sessions): the rows of
 * several sessions must come back merged in id order, the one order every connection sees (DESIGN.md
 * invariant 1), never session by session.
 */
describe('replay across several sessions', () => {
  it('returns the events of every session merged in id order, with the cursor and limit applied to that order', async () => {
    const context = tempTraceContext();
    const sessions = ['sess_planner', 'sess_worker_b', 'sess_worker_a'];
    // Round-robin emits interleave the sessions' ids, so a per-session order differs from id order.
    for (let round = 0; round < 5; round += 1) {
      for (const sessionId of sessions) {
        context.bus.emit({
          type: 'session.resumed',
          session_id: sessionId,
          payload: { workspace_hash: 'a'.repeat(64), last_event_id_at_resume: null },
        });
      }
    }
    await context.flush();
    const store = new TraceStore(context.db);
    const stored = sessions.flatMap((id) => store.sessionEvents(id).map((e) => e.id)).sort();
    expect(stored).toHaveLength(15);

    const all = store.replay({ sessionIds: sessions, afterId: null, limit: 100 });
    expect(all.rows.map((row) => row[0])).toEqual(stored);
    expect(
      store.replayJson({ sessionIds: sessions, afterId: null, limit: 100 }).rows.map(([id]) => id),
    ).toEqual(stored);

    // After a cursor, capped: the next ids in global order, and tooLarge says more follow.
    const page = store.replayJson({ sessionIds: sessions, afterId: stored[3]!, limit: 4 });
    expect(page.rows.map(([id]) => id)).toEqual(stored.slice(4, 8));
    expect(page.tooLarge).toBe(true);
  });
});
