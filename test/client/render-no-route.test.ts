import { describe, expect, it } from 'vitest';
import type { ClientItem } from '../../src/client/client.js';
import { initialState } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';

/** A turn no model could serve: `metis send --follow` and `tail` say why, from the event itself. */
describe('rendering a turn no model could serve', () => {
  const turnCompleted = (signalsExtra: unknown): ClientItem => ({
    kind: 'frame',
    frame: {
      type: 'event',
      event: {
        id: 'evt_1',
        timestamp: '2026-11-28T12:00:00.000000Z',
        session_id: 'sess_x',
        turn_id: 'turn_1',
        parent_event_id: 'evt_0',
        type: 'turn.completed',
        actor: 'system',
        sensitivity: 'pseudonymous',
        seq: 3,
        payload: {
          stop_reason: 'end_turn',
          llm_call_count: 0,
          tool_call_count: 0,
          total_input_tokens: 0,
          total_output_tokens: 0,
          total_cost_usd: 0,
          wall_time_seconds: 0.01,
          signals_extra: signalsExtra,
        },
      },
    } as never,
  });

  it('prints each candidate routing rejected, as the server sent them', () => {
    const text = renderItem(
      turnCompleted({
        failure: 'no_model_available',
        routing: ['global_default: rejected (provider scripted unavailable (auth_error))'],
      }),
      initialState,
      'sess_x',
      { color: false },
    );
    expect(text).toBe(
      '■ turn failed: no model could serve it\n  global_default: rejected (provider scripted unavailable (auth_error))\n',
    );
  });

  it('points at the server log when an older server sent no reasons', () => {
    const text = renderItem(turnCompleted(null), initialState, 'sess_x', { color: false });
    expect(text).toBe('■ turn failed: no model could serve it\n  the server log has the routing chain\n');
  });
});
