import { describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../dashboard/src/api-types.js';
import { causalTree, spanLabel, spans } from '../../dashboard/src/trace-model.js';

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
    turn_id: 'turn_1',
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
  event('e2', 'llm.call_started', 'e1', 'sess_p', { model: 'scripted:demo' }),
  event('e3', 'llm.call_completed', 'e2'),
  event('e4', 'tool.called', 'e3', 'sess_p', { tool_name: 'delegate' }),
  event('e5', 'delegate.started', 'e3', 'sess_p', { worker_session_id: 'sess_w' }),
  event('w1', 'session.created', null, 'sess_w'),
  event('w2', 'turn.started', null, 'sess_w'),
  event('w3', 'turn.completed', 'w2', 'sess_w'),
  event('e6', 'delegate.completed', 'e5'),
  event('e7', 'tool.completed', 'e4'),
  event('e8', 'turn.completed', 'e1'),
];

describe('the trace view model', () => {
  it('nests each event under its parent, and a worker session under the delegate.started naming it', () => {
    const roots = causalTree(delegated);
    expect(roots.map((node) => node.event.id)).toEqual(['e1']);
    const find = (id: string, nodes = roots): any =>
      nodes.map((node) => (node.event.id === id ? node : find(id, node.children))).find(Boolean);
    expect(find('e5').children.map((node: any) => node.event.id)).toEqual(['w1', 'w2', 'e6']);
    expect(find('w2').children.map((node: any) => node.event.id)).toEqual(['w3']);
    // Without the delegation in view, the worker's events are roots of their own.
    expect(causalTree(delegated.filter((e) => e.id !== 'e5')).map((node) => node.event.id)).toEqual([
      'e1',
      'w1',
      'w2',
      'e6',
    ]);
  });

  it('pairs each start with its end and nests spans by causality, worker turns below their delegation', () => {
    const list = spans(delegated);
    const of = (id: string) => list.find((span) => span.start.id === id)!;
    expect(of('e1')).toMatchObject({ depth: 0, end: { id: 'e8' } });
    expect(of('e2')).toMatchObject({ depth: 1, end: { id: 'e3' } });
    expect(of('e4')).toMatchObject({ depth: 2, end: { id: 'e7' } });
    expect(of('e5')).toMatchObject({ depth: 2, end: { id: 'e6' } });
    expect(of('w2')).toMatchObject({ depth: 3, end: { id: 'w3' } });
    expect(of('e2').endMs! - of('e2').startMs).toBe(100);
    expect(list.map(spanLabel)).toEqual([
      'turn',
      'model call scripted:demo',
      'tool delegate',
      'delegate',
      'turn',
    ]);
  });
});
