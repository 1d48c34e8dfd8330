import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { LOOP_BUSY_TIMEOUT_MS } from '../../src/core/store/database.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/**
 * A storage outage long enough to fill the trace writer's buffer drops events, and says so with
 * `bus.gap_detected`. It must never drop the event that ends a turn: a turn the server acknowledged
 * would then never end, for its clients (`send --follow` waits for ever) or in the store.
 */
describe('a buffer overflow during a storage outage', () => {
  it('drops events of the turn but keeps its end, so the turn ends in the store and for subscribers', async () => {
    const context = tempTraceContext({ writerBuffer: { maxEvents: 30 } });
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      config: testRuntimeConfig({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } }),
    });
    // As the server sets it: a write under another process's lock fails at once and is retried later.
    context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
    const committed: { type: string; turn_id: string | null }[] = [];
    context.writer.onCommit((batch) => committed.push(...batch));
    const session = runtime.createSession({ workspacePath: tempDir('metis-ws-') });
    await context.flush();

    // The turn starts (its turn.started stored, so it may call the model) before the lock is taken.
    const streaming = new Promise<void>((resolve) => {
      runtime.streaming.subscribe((event) => {
        if (event.type === 'text.delta') resolve();
      });
    });
    const turn = runtime.submitTurn(session.id, 'slow: a long answer');
    await streaming;
    const lock = await holdWriteLockInChild(context.dbPath, 60_000);
    // Another session's traffic fills the bounded buffer while the lock is held.
    for (let round = 0; round < 10; round += 1) {
      for (let i = 0; i < 10; i += 1) {
        context.bus.emit({
          type: 'session.resumed',
          session_id: 'sess_flood',
          payload: { workspace_hash: 'f'.repeat(64), last_event_id_at_resume: null },
        });
      }
      await delay(20);
    }
    const outcome = await turn.done;
    expect(outcome.status).toBe('completed');
    expect(context.writer.stats.droppedEvents).toBeGreaterThan(0);
    await lock.release();
    await context.flush();
    await delay(100); // the gap report is emitted on the tick after storage came back
    await context.flush();

    const stored = context.db
      .prepare('SELECT type FROM events WHERE turn_id = ? ORDER BY seq')
      .pluck()
      .all(turn.turnId) as string[];
    expect(stored[0]).toBe('turn.started');
    expect(stored.at(-1)).toBe('turn.completed');
    expect(committed.filter((e) => e.turn_id === turn.turnId).at(-1)?.type).toBe('turn.completed');
    // What was dropped is reported, in the sessions it was dropped from.
    const gaps = context.db
      .prepare("SELECT session_id FROM events WHERE type = 'bus.gap_detected'")
      .pluck()
      .all() as string[];
    expect(gaps.length).toBeGreaterThan(0);
    await runtime.close();
  }, 60_000);
});
