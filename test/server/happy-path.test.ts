import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';

describe('streaming server happy path (§10.1, §11.1 test 1)', () => {
  it('a client following §10.1 (preset:chat) sees its exact sequence; the text equals final_content', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await t.attach(sessionId);
    client.send({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: true });
    const ack = await client.waitFor((f) => f.type === 'subscribe_ack');
    expect(ack.resolved_filter.event_types).toContain('text.delta');
    const snapshot = await client.waitFor((f) => f.type === 'snapshot');
    expect(snapshot.session.id).toBe(sessionId);
    await t.submit(sessionId, 'hello there');
    await client.waitFor((f) => f.type === 'event' && f.event.type === 'turn.completed');
    const events = client.events();
    expect(events.every((e) => e.session_id === sessionId)).toBe(true);
    const types = events
      .map((e) => e.type)
      .filter((t, i, all) => t !== 'text.delta' || all[i - 1] !== 'text.delta');
    expect(types).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'text.delta',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    const ids = client.events().map((e) => e.id);
    expect([...ids].sort()).toEqual(ids);
    expect(events.every((e) => e.id > snapshot.snapshot_at_event_id)).toBe(true);
    const text = events
      .filter((e) => e.type === 'text.delta')
      .map((e) => e.payload.text)
      .join('');
    const complete = events.find((e) => e.type === 'message.complete');
    expect(complete.payload.final_content).toEqual([{ type: 'text', text }]);
    expect(text).toBe('You said: hello there');
  });
});
