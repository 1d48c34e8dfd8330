import { describe, expect, it } from 'vitest';
import { SessionStore } from '../../src/core/store/session-store.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * Session-store rows share the trace writer's ordered queue with events. A row written right after an
 * event (the runtime saves a message right after it emits the event the message belongs to) must not
 * commit ahead of it: after a crash between the two, the store would hold a message whose event was
 * never recorded, and crash recovery would contradict it.
 */
describe('a session-store row written after an event', () => {
  it('commits after the events emitted before it, even when the bus has not dispatched them yet', () => {
    const context = tempTraceContext();
    const sessions = new SessionStore(context.db);
    const event = context.bus.emit({
      type: 'session.resumed',
      session_id: 'sess_order',
      payload: { workspace_hash: 'a'.repeat(64), last_event_id_at_resume: null },
    })!;
    // No await: the event is still in the bus's queue, waiting for the next tick.
    sessions.saveMessage(
      {
        id: 'msg_after',
        session_id: 'sess_order',
        turn_id: null,
        role: 'user',
        content: [{ type: 'text', text: 'hi' }],
        status: 'complete',
        model: null,
        usage: null,
      },
      event.id,
    );
    const storedEvent = context.db.prepare('SELECT count(*) FROM events WHERE id = ?').pluck().get(event.id);
    const storedRow = context.db
      .prepare("SELECT count(*) FROM messages WHERE id = 'msg_after'")
      .pluck()
      .get();
    expect(storedRow).toBe(1);
    expect(storedEvent).toBe(1);
  });
});
