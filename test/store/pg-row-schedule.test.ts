import { describe, expect, it } from 'vitest';
import { renderRowChanges } from '../../src/core/store/postgres/pg-row-applier.js';
import type { RowChange } from '../../src/core/store/row-change.js';
import { closeOpen, pattern, session, toolCall, toolCallUpdate } from '../helpers/row-change-builders.js';

/**
 * How PostgreSQL's row applier groups a batch (pg-row-schedule.ts): a change joins the nearest earlier
 * statement of its kind when it commutes with every change queued between; the rows it leaves are
 * compared with SQLite's in row-applier-contract.test.ts.
 */
describe('PostgreSQL row statements of a batch', () => {
  it('changes of a kind go in one statement past changes they commute with, a key once per statement', () => {
    const spend = (sessionId: string) => ({ kind: 'budget.spend', sessionId, usd: 1, tokens: 1 }) as const;
    const sticky = (sessionId: string) =>
      ({ kind: 'session.sticky', sessionId, model: 'm', atUs: 1 }) as const;
    const namesOf = (changes: readonly RowChange[]) =>
      renderRowChanges(changes).map((statement) => statement.name.replace('metis_rows_', ''));
    expect(
      namesOf([
        session('sess_a', 1),
        session('sess_b', 1),
        spend('sess_a'),
        spend('sess_a'),
        spend('sess_b'),
        sticky('sess_a'),
        sticky('sess_a'),
        sticky('sess_b'),
        sticky('sess_b'),
        sticky('sess_a'),
        { kind: 'pattern.deleteAll' },
        { kind: 'pattern.deleteAll' },
      ]),
    ).toEqual([
      ...['session_create', 'budget_spend', 'session_sticky', 'session_sticky', 'session_sticky'],
      ...['pattern_delete_all', 'pattern_delete_all'],
    ]);
    // A turn's changes, session after session: each kind joins its group across the other sessions'.
    const turn = (sessionId: string, n: number): RowChange[] => [
      toolCall(`call_${n}`, 'running', { sessionId }),
      { ...toolCallUpdate(`call_${n}`, 'completed'), sessionId },
      spend(sessionId),
      sticky(sessionId),
    ];
    expect(namesOf([...turn('sess_a', 1), ...turn('sess_b', 2), ...turn('sess_c', 3)])).toEqual([
      'tool_call_insert',
      'tool_call_update',
      'budget_spend',
      'session_sticky',
    ]);
    // A row needing its session's (a foreign key) does not pass the session's creation.
    const message = (sessionId: string): RowChange => ({
      kind: 'message.upsert',
      id: `msg_${sessionId}`,
      sessionId,
      turnId: null,
      role: 'user',
      contentJson: '"hi"',
      status: 'complete',
      model: null,
      usageJson: null,
      createdAtUs: 1,
    });
    expect(
      namesOf([
        message('sess_a'),
        toolCall('call_1', 'pending'),
        session('sess_new', 1),
        message('sess_new'),
      ]),
    ).toEqual(['message_upsert', 'tool_call_insert', 'session_create', 'message_upsert']);
    // Nothing passes a change of its rows: a call's insert or update, a close of its session's calls,
    // its session's creation, a trim of its table.
    const close = closeOpen(30);
    expect(
      namesOf([
        toolCallUpdate('call_1', 'running'),
        toolCall('call_1', 'pending'),
        toolCallUpdate('call_1', 'completed'),
        toolCall('call_2', 'pending'),
        close,
        toolCall('call_3', 'pending'),
        sticky('sess_b'),
        session('sess_b', 2),
        sticky('sess_b'),
        pattern(1, 1),
        { kind: 'pattern.deleteOldest', count: 1 },
        pattern(2, 2),
      ]),
    ).toEqual([
      ...[
        'tool_call_update',
        'tool_call_insert',
        'tool_call_update',
        'tool_call_close_open',
        'tool_call_insert',
      ],
      ...['session_sticky', 'session_create', 'session_sticky'],
      ...['pattern_fingerprints', 'pattern_outcomes', 'pattern_delete_oldest'],
      ...['pattern_fingerprints', 'pattern_outcomes'],
    ]);
  });
});
