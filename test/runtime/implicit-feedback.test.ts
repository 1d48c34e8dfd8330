import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { startRuntime } from '../helpers/runtime.js';

/** Issue 18 point 3: feedback.implicit from the heuristics of bus §6.9, from real turns. */

function harness() {
  const h = startRuntime();
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  const turn = async (message: string) => {
    const { turnId, done } = h.runtime.submitTurn(session.id, message);
    await h.settle(done);
    return turnId;
  };
  const signals = (): MetisEvent[] => h.frames.filter((e) => e.type === 'feedback.implicit');
  const startOf = (turnId: string) =>
    h.frames.find((e) => e.type === 'turn.started' && e.turn_id === turnId)!;
  return { h, session, turn, signals, startOf };
}

describe('implicit feedback', () => {
  it('asking again (nearly) the same is a retry of the turn before, said when the new turn starts', async () => {
    const { turn, signals, startOf } = harness();
    const first = await turn('What is the weather in Paris today?');
    const second = await turn('what is the weather in paris today');
    const [retry] = signals();
    expect(retry).toMatchObject({
      session_id: startOf(second).session_id,
      turn_id: null,
      actor: 'system',
      parent_event_id: startOf(second).id,
      payload: {
        type: 'retry',
        subject_turn_id: first,
        context: { similarity: 1, similar_to_turn_id: first },
      },
    });
    expect(retry!.payload.confidence).toBeGreaterThan(0.8);
    expect(retry!.payload.confidence).toBeLessThanOrEqual(1);
  });

  it('"no, actually…" is an edit follow-up; an unrelated message is nothing', async () => {
    const { turn, signals } = harness();
    await turn('hello');
    await turn('time');
    expect(signals()).toEqual([]);
    const timeTurn = await turn('think: what day is it');
    await turn('No, actually I meant the date in Tokyo');
    expect(signals().map((e) => e.payload)).toEqual([
      expect.objectContaining({ type: 'edit_followup', confidence: 0.7, subject_turn_id: timeTurn }),
    ]);
  });

  it('a model swap after a turn, once per turn; an abandoned session; a session closed after a good turn', async () => {
    const { h, session, turn, signals } = harness();
    const first = await turn('hello');
    h.runtime.setStickyModel(session.id, 'scripted:other');
    h.runtime.setStickyModel(session.id, 'scripted:third'); // the same turn is judged once
    h.runtime.endSession(session.id, 'abandoned'); // judged already: nothing more
    await h.context.flush();
    expect(signals().map((e) => e.payload)).toEqual([
      {
        type: 'manual_swap',
        confidence: 0.6,
        subject_turn_id: first,
        context: { from_model: 'scripted:demo', to_model: 'scripted:other' },
      },
    ]);

    const left = h.runtime.createSession({ workspacePath: h.workspace });
    await h.runtime.submitTurn(left.id, 'hello').done;
    h.runtime.endSession(left.id, 'abandoned');
    const closed = h.runtime.createSession({ workspacePath: h.workspace });
    await h.runtime.submitTurn(closed.id, 'hello').done;
    h.runtime.endSession(closed.id, 'completed');
    await h.context.flush();
    const byOutcome = (sessionId: string) =>
      signals()
        .filter((e) => e.session_id === sessionId)
        .map((e) => [e.payload.type, e.parent_event_id === null]);
    expect(byOutcome(left.id)).toEqual([['abandon', false]]);
    expect(byOutcome(closed.id)).toEqual([['accept', false]]);
  });
});
