import { describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../dashboard/src/api-types.js';
import { flatten, spanForest, spanLabel } from '../../dashboard/src/trace-model.js';
import { foldedAxis, zoomed } from '../../dashboard/src/waterfall-model.js';

let clock = Date.parse('2026-11-27T10:00:00.000Z');
function event(
  id: string,
  type: string,
  parent: string | null,
  session = 'sess_p',
  payload = {},
): StoredEvent {
  clock += 100;
  return {
    id,
    timestamp: new Date(clock).toISOString(),
    session_id: session,
    turn_id: session === 'sess_w' ? 'turn_w' : 'turn_1',
    parent_event_id: parent,
    type,
    actor: 'agent',
    sensitivity: 'pseudonymous',
    payload,
    seq: null,
  };
}

/** A planner turn that delegates: the worker's events have no parent in the planner's chain. */
const delegated = [
  event('e1', 'turn.started', null),
  event('e1r', 'route.decided', 'e1', 'sess_p', { chosen_model: 'scripted:demo', chain: [] }),
  event('e2', 'llm.call_started', 'e1', 'sess_p', { model: 'scripted:demo' }),
  event('e3', 'llm.call_completed', 'e2', 'sess_p', { cost_usd: 0.001 }),
  event('e4', 'tool.called', 'e3', 'sess_p', { tool_name: 'delegate', tool_use_id: 'tu_1' }),
  event('e5', 'delegate.started', 'e3', 'sess_p', { worker_session_id: 'sess_w', tool_use_id: 'tu_1' }),
  event('w1', 'session.created', null, 'sess_w'),
  event('w2', 'turn.started', null, 'sess_w'),
  event('w3', 'turn.completed', 'w2', 'sess_w', { llm_call_count: 0 }),
  event('e6', 'delegate.completed', 'e5'),
  event('e6m', 'memory.updated', 'e3', 'sess_p', { file: 'MEMORY.md' }),
  event('e7', 'tool.completed', 'e4', 'sess_p', { success: true }),
  event('e9', 'llm.call_started', 'e7', 'sess_p', { model: 'scripted:demo' }),
  event('e10', 'llm.call_failed', 'e9', 'sess_p', { error_class: 'auth', retry_count: 2 }),
  event('e8', 'turn.completed', 'e1', 'sess_p', { llm_call_count: 2 }),
];

describe('the span tree', () => {
  it('nests spans by what they mean: model calls under the turn, a tool under its call, a worker under its delegation', () => {
    const [turn, ...others] = spanForest(delegated);
    expect(others).toEqual([]);
    const shape = (span: any): unknown => [span.start.id, span.status, span.children.map(shape)];
    // The second model call hangs under the turn, not under the tool.completed that is its parent event.
    expect(shape(turn)).toEqual([
      'e1',
      'failed',
      [
        ['e2', 'completed', [['e4', 'completed', [['e5', 'completed', [['w2', 'failed', []]]]]]]],
        ['e9', 'failed', []],
      ],
    ]);
    expect(turn!.marks.map((mark) => mark.id)).toEqual(['e1r']);
    // The memory change made while the tool ran shows inside the tool.
    expect(
      flatten(turn!)
        .find(({ span }) => span.start.id === 'e4')!
        .span.marks.map((m) => m.id),
    ).toEqual(['e6m']);
    expect(flatten(turn!).map(({ span, depth }) => `${depth} ${spanLabel(span)}`)).toEqual([
      '0 turn',
      '1 model call scripted:demo',
      '2 tool delegate',
      '3 delegate',
      '4 turn',
      '1 model call scripted:demo',
    ]);
  });

  it('says cancelled for a cancelled turn, and running for one not ended', () => {
    const cancelled = spanForest([event('c1', 'turn.started', null), event('c2', 'turn.cancelled', 'c1')]);
    expect(cancelled.map((span) => span.status)).toEqual(['cancelled']);
    const running = spanForest([event('r1', 'turn.started', null), event('r2', 'llm.call_started', 'r1')]);
    expect(running.map((span) => [span.status, span.endMs])).toEqual([['running', null]]);
  });
});

describe('the waterfall axis', () => {
  it('folds a long idle stretch between spans so the short ones keep their width', () => {
    const window = { fromMs: 0, toMs: 100_000 };
    const axis = foldedAxis(window, [
      { fromMs: 0, toMs: 1_000 },
      { fromMs: 99_000, toMs: 100_000 },
    ]);
    expect(axis.gaps).toHaveLength(1);
    // Each one-second span takes nearly half the axis, not a hundredth.
    expect(axis.x(1_000)).toBeGreaterThan(0.45);
    expect(axis.x(99_000)).toBeLessThan(0.55);
    expect(axis.x(0)).toBe(0);
    expect(axis.x(100_000)).toBe(1);
    // A short pause (routing, say) is work, not idleness: no fold.
    expect(foldedAxis({ fromMs: 0, toMs: 100 }, [{ fromMs: 50, toMs: 100 }]).gaps).toEqual([]);
  });

  it('zooms around a moment and stays inside the turn', () => {
    const turn = { fromMs: 1_000, toMs: 2_000 };
    expect(zoomed(turn, turn, 2, 1_500)).toEqual({ fromMs: 1_250, toMs: 1_750 });
    expect(zoomed(turn, turn, 4, 1_010)).toEqual({ fromMs: 1_000, toMs: 1_250 });
    expect(zoomed(turn, { fromMs: 1_000, toMs: 1_250 }, 0.25, 1_125)).toEqual(turn);
  });
});
