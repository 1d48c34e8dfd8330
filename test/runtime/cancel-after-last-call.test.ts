import { describe, expect, it } from 'vitest';
import { byType, shape, startRuntime } from '../helpers/runtime.js';

/**
 * A cancel the runtime accepted (202) must end the turn cancelled, even when it lands after the last
 * model call finished streaming and nothing is left to stop: the client was told "cancelling", so a
 * `turn.completed` would contradict it (streaming §6.1, §6.2.4).
 */
describe('a cancel accepted after the last model call finished streaming', () => {
  it.each([
    ['a plain answer', 'hello there'],
    ['the answer after a tool call', 'time'],
  ])('ends %s as turn.cancelled, not turn.completed', async (_label, message) => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    let turnId = '';
    let accepted: string | null = null;
    // message.complete of the final answer is the last streaming event before the turn ends: cancel
    // there, synchronously, so the model call is complete and no tool is left to run.
    h.runtime.streaming.subscribe((event) => {
      if (event.type !== 'message.complete' || event.payload.stop_reason !== 'end_turn') return;
      accepted = h.runtime.cancelTurn(session.id, turnId, 'user_cancel');
    });
    const turn = h.runtime.submitTurn(session.id, message);
    turnId = turn.turnId;
    const outcome = await turn.done;
    await h.context.flush();

    expect(accepted).toBe('cancelling');
    expect(outcome.status).toBe('cancelled');
    const events = h.framesOf(session.id);
    expect(byType(events, 'turn.completed')).toHaveLength(0);
    const [cancelled] = byType(events, 'turn.cancelled');
    expect(cancelled?.payload).toMatchObject({ reason: 'user_cancel' });
    expect(cancelled?.parent_event_id).toBe(byType(events, 'turn.started')[0]!.id);
    // The last call completed normally before the cancel was seen.
    expect(shape(events).slice(-4)).toEqual([
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.cancelled',
    ]);
  });
});
