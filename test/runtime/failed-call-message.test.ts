import { describe, expect, it } from 'vitest';
import { initialState, reduce } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';
import { messageComplete } from '../../src/core/events/streaming.js';
import { one, startProviderContext, turn } from '../helpers/provider-turns.js';
import { byType, startRuntime } from '../helpers/runtime.js';

/**
 * Issue 14 observation 7: a failed model call used to end its streamed message with
 * `stop_reason: "error"`, outside streaming §5.3's enum. The message now ends with the spec's
 * `cancelled` (the stop reason §6.2.1 gives a partial message) plus the additive `error_class` of the
 * `llm.call_failed` that follows, and clients still show the failure (docs/decisions.md "A failed
 * call's message").
 */

const SPEC_STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'cancelled'];

function expectCutShort(events: ReturnType<typeof byType>, errorClass: string) {
  const complete = one(events, 'message.complete');
  expect(SPEC_STOP_REASONS).toContain(complete.stop_reason);
  expect(complete).toMatchObject({ stop_reason: 'cancelled', error_class: errorClass });
  expect(one(events, 'llm.call_failed').error_class).toBe(errorClass);
  // A client built from the reducer shows the message as failed, not as a user's cancel.
  const state = events.reduce((s, event) => reduce(s, { type: 'event', event }), initialState);
  const message = state.messages.find((m) => m.id === complete.message_id);
  expect(message?.status).toBe('error');
  // And the text renderer shows the failure and the failed turn, never "(cancelled)"; a message that
  // failed before its first token prints no empty "assistant:" line (nor "(cut short)" of nothing).
  let text = '';
  let rendered = initialState;
  for (const event of events) {
    const frame = { type: 'event', event };
    rendered = reduce(rendered, frame);
    text += renderItem({ kind: 'frame', frame } as never, rendered, String(event.session_id), {
      color: false,
    });
  }
  expect(text).not.toMatch(/^assistant:/m);
  expect(text).toContain(`model call failed (${errorClass})`);
  expect(text).toMatch(new RegExp(`■ turn failed \\(${errorClass}(, after \\d+ retr(y|ies))?\\)`));
  expect(text).not.toContain('(cancelled)');
  expect(byType(events, 'turn.cancelled')).toEqual([]);
}

describe("a failed model call's message ends with a stop reason of the spec's enum", () => {
  it('the scripted model\'s "fail: server_error"', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const outcome = await h.runtime.submitTurn(session.id, 'fail: server_error').done;
    await h.context.flush();
    expect(outcome.status).toBe('failed');
    expectCutShort(h.framesOf(session.id), 'server_error');
  });

  it('a provider that answers HTTP 500', async () => {
    const ctx = await startProviderContext(
      [{ status: 500, json: { error: { message: 'upstream exploded', type: 'server_error' } } }],
      (url) => ({
        default_model: 'openai:gpt-test',
        providers: {
          openai: { base_url: `${url}/v1`, api_key: 'test-key-1234567890abcdef', max_retries: 0 },
        },
      }),
    );
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    expectCutShort(events, 'server_error');
  });

  it('the streaming schema refuses the old "error" stop reason', () => {
    const base = {
      message_id: 'msg_01HZZZZZZZZZZZZZZZZZZZZZZZ',
      final_content: [],
      usage: {
        input_tokens: 0,
        output_tokens: 0,
        cached_input_tokens: 0,
        cache_creation_input_tokens: 0,
        cost_usd: 0,
        pricing_version: 'v1',
      },
    };
    expect(messageComplete.schema.safeParse({ ...base, stop_reason: 'error' }).success).toBe(false);
    expect(
      messageComplete.schema.safeParse({ ...base, stop_reason: 'cancelled', error_class: 'server_error' })
        .success,
    ).toBe(true);
  });
});
