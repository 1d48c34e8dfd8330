import { describe, expect, it } from 'vitest';
import type { RuntimeConfigInput } from '../../../src/core/config/runtime-schema.js';
import {
  type ProviderContext as Context,
  expectOneMessage,
  FAILED_TAIL,
  HEAD,
  one,
  startProviderContext,
  TEXT_TURN,
  texts,
  turn,
} from '../../helpers/provider-turns.js';
import { byType, shape } from '../../helpers/runtime.js';
import type { ReplayResponse } from '../../helpers/sse-server.js';

const KEY = 'test-key-9e8d7c6b5a4f3e21';
const MODEL = 'openai:gpt-test';
const PRICE = {
  input_per_mtok: 2.5,
  output_per_mtok: 10,
  cached_input_per_mtok: 1.25,
  cache_creation_per_mtok: 0,
};

function setup(
  responses: ReplayResponse[],
  provider: Record<string, unknown> = {},
  config: (url: string) => RuntimeConfigInput = (url) => ({
    default_model: MODEL,
    providers: { openai: { base_url: `${url}/v1`, api_key: KEY, ...provider } },
    pricing: { 'openai:*': PRICE },
  }),
): Promise<Context> {
  return startProviderContext(responses, config);
}

const HELLO = [{ type: 'text', text: 'Hello from GPT.' }];
const ERROR_FIRST: ReplayResponse = { fixture: 'openai-error-first.sse' };

/** The message rows of a session as [role, status, content], in order. */
const rows = (ctx: Context) =>
  ctx.h.runtime.sessions.messages(ctx.sessionId).map((m) => [m.role, m.status, m.content]);

describe('openai adapter through the openai SDK against a replay server', () => {
  it('plain text: deltas, include_usage usage with cached tokens, cost, request shape, persisted message', async () => {
    const ctx = await setup([{ fixture: 'openai-text.sse', headers: { 'x-request-id': 'req_openai_1' } }]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(shape(events)).toEqual(TEXT_TURN);
    expect(one(events, 'llm.call_completed').provider_request_id).toBe('req_openai_1');
    expect(one(events, 'llm.call_started').request_id).toMatch(/^req_[0-9A-Z]{26}$/);
    expect(one(events, 'llm.call_started')).toMatchObject({ model: MODEL, provider: 'openai' });
    expect(texts(events, 'text.delta')).toEqual(['Hello', ' from', ' GPT.']);
    // prompt_tokens 130 of which 100 cached: input (uncached) 30, cached 100.
    const usage = {
      input_tokens: 30,
      output_tokens: 4,
      cached_input_tokens: 100,
      cache_creation_input_tokens: 0,
      // (30×2.5 + 4×10 + 100×1.25) / 1e6
      cost_usd: 0.00024,
      pricing_version: '2026-11-01',
    };
    expect(one(events, 'message.complete')).toEqual({
      message_id: expect.any(String),
      stop_reason: 'end_turn',
      final_content: [{ type: 'text', text: 'Hello from GPT.' }],
      usage,
    });
    expect(one(events, 'llm.call_completed')).toMatchObject({ ...usage, stop_reason: 'end_turn' });

    const [request] = ctx.server.requests;
    expect(ctx.server.requests).toHaveLength(1);
    expect(request!.path).toBe('/v1/chat/completions');
    expect(request!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(request!.body).toMatchObject({
      model: 'gpt-test',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Say hello' }],
    });
    const readFile = request!.body.tools.find(
      (t: { function: { name: string } }) => t.function.name === 'read_file',
    );
    expect(readFile).toMatchObject({ type: 'function', function: { parameters: { type: 'object' } } });

    const messages = ctx.h.runtime.sessions.messages(ctx.sessionId);
    expect(messages.map((m) => [m.role, m.status])).toEqual([
      ['user', 'complete'],
      ['assistant', 'complete'],
    ]);
    expect(messages[1]).toMatchObject({
      model: MODEL,
      content: [{ type: 'text', text: 'Hello from GPT.' }],
      usage,
    });
  });

  it('reasoning_content (reasoning servers) streams as thinking before the text', async () => {
    const ctx = await setup([{ fixture: 'openai-reasoning.sse' }]);
    const { events } = await turn(ctx, 'Why is the sky blue?');
    expect(shape(events)).toEqual([
      ...HEAD,
      'thinking.delta*',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(
      byType(events, 'thinking.delta').map((e) => [e.payload.content_block_index, e.payload.text]),
    ).toEqual([
      [0, 'Short wavelengths'],
      [0, ' scatter more.'],
    ]);
    const finalContent = [
      { type: 'thinking', thinking: 'Short wavelengths scatter more.', signature: null },
      { type: 'text', text: 'Rayleigh scattering makes it blue.' },
    ];
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'end_turn',
      final_content: finalContent,
    });
    expect(one(events, 'llm.call_completed')).toMatchObject({
      input_tokens: 40,
      output_tokens: 30,
      produced_thinking_blocks: 1,
    });
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId)[1]).toMatchObject({ content: finalContent });
  });

  it('one tool call: argument fragments → tool.use_input_delta, parsed final_input, tool message sent back', async () => {
    const ctx = await setup([{ fixture: 'openai-tool-call.sse' }, { fixture: 'openai-tool-answer.sse' }]);
    const { outcome, events } = await turn(ctx, 'What do my notes say?');
    expect(outcome.status).toBe('completed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'message.complete',
      'llm.call_completed',
      'tool.called',
      'tool.completed',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(one(events, 'tool.use_start')).toMatchObject({
      content_block_index: 0,
      tool_use_id: 'call_ReadNotes',
      tool_name: 'read_file',
    });
    expect(byType(events, 'tool.use_input_delta').map((e) => e.payload.partial_json)).toEqual([
      '{"pa',
      'th": "no',
      'tes.txt"}',
    ]);
    expect(one(events, 'tool.use_end')).toMatchObject({ final_input: { path: 'notes.txt' } });
    expect(one(events, 'llm.call_completed')).toMatchObject({
      stop_reason: 'tool_use',
      produced_tool_calls: 1,
      input_tokens: 300,
      output_tokens: 18,
    });
    expect(one(events, 'turn.completed')).toMatchObject({ llm_call_count: 2, tool_call_count: 1 });

    const second = ctx.server.requests[1]!.body;
    expect(second.messages).toEqual([
      { role: 'user', content: 'What do my notes say?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_ReadNotes',
            type: 'function',
            function: { name: 'read_file', arguments: '{"path":"notes.txt"}' },
          },
        ],
      },
      {
        role: 'tool',
        tool_call_id: 'call_ReadNotes',
        content: expect.stringContaining('hello from the notes'),
      },
    ]);
    const messages = ctx.h.runtime.sessions.messages(ctx.sessionId);
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(messages[1]!.content).toEqual([
      { type: 'tool_use', id: 'call_ReadNotes', name: 'read_file', input: { path: 'notes.txt' } },
    ]);
  });

  it('two tool calls in one message, keyed by index: both start, stream and end', async () => {
    const ctx = await setup([{ fixture: 'openai-tool-calls.sse' }, { fixture: 'openai-tool-answer.sse' }]);
    const { events } = await turn(ctx, 'Time and notes, please');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'tool.use_end',
      'message.complete',
      'llm.call_completed',
      'tool.called',
      'tool.called',
      'tool.completed',
      'tool.completed',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(
      byType(events, 'tool.use_start').map((e) => [e.payload.content_block_index, e.payload.tool_name]),
    ).toEqual([
      [1, 'current_time'],
      [2, 'read_file'],
    ]);
    expect(byType(events, 'tool.use_end').map((e) => e.payload)).toEqual([
      expect.objectContaining({ content_block_index: 1, tool_use_id: 'call_Clock', final_input: {} }),
      expect.objectContaining({
        content_block_index: 2,
        tool_use_id: 'call_Notes',
        final_input: { path: 'notes.txt' },
      }),
    ]);
    expect(one(events, 'llm.call_completed')).toMatchObject({
      stop_reason: 'tool_use',
      produced_tool_calls: 2,
    });
    const second = ctx.server.requests[1]!.body.messages;
    expect(second[1].tool_calls.map((c: { id: string }) => c.id)).toEqual(['call_Clock', 'call_Notes']);
    expect(
      second.slice(2).map((m: { role: string; tool_call_id: string }) => [m.role, m.tool_call_id]),
    ).toEqual([
      ['tool', 'call_Clock'],
      ['tool', 'call_Notes'],
    ]);
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId)[1]!.content).toEqual([
      { type: 'text', text: 'Checking both.' },
      { type: 'tool_use', id: 'call_Clock', name: 'current_time', input: {} },
      { type: 'tool_use', id: 'call_Notes', name: 'read_file', input: { path: 'notes.txt' } },
    ]);
  });

  it('an error chunk inside a 200 stream is server_error, not retried after the first token', async () => {
    const ctx = await setup([{ fixture: 'openai-server-error.sse' }, { fixture: 'openai-text.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say something');
    expect(outcome.status).toBe('failed');
    expect(shape(events)).toEqual([...HEAD, 'text.delta*', ...FAILED_TAIL]);
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'I was about to say' }],
    });
    const failed = one(events, 'llm.call_failed');
    expect(failed).toMatchObject({ provider: 'openai', error_class: 'server_error', retry_count: 0 });
    expect(failed.error_message_redacted).toContain('overloaded');
    expect(ctx.server.requests).toHaveLength(1);
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId)[1]).toMatchObject({ status: 'error' });
  });

  it('an error chunk before any token of a 200 stream is retried: one message reaches the client', async () => {
    const ctx = await setup([ERROR_FIRST, { fixture: 'openai-text.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(ctx.server.requests[1]!.body).toEqual(ctx.server.requests[0]!.body);
    expect(await ctx.server.outcome(0)).toBe('completed');
    // Nothing of the failed attempt leaks: one message.start … message.complete, one call, no failure.
    expect(shape(events)).toEqual(TEXT_TURN);
    expectOneMessage(events);
    expect(byType(events, 'llm.call_started')).toHaveLength(1);
    expect(byType(events, 'llm.call_failed')).toHaveLength(0);
    expect(texts(events, 'text.delta')).toEqual(['Hello', ' from', ' GPT.']);
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'end_turn', final_content: HELLO });
    // llm.call_completed has no retry_count (bus §6.3): a retry that succeeds is invisible.
    expect(one(events, 'llm.call_completed')).toMatchObject({ stop_reason: 'end_turn', input_tokens: 30 });
    expect(rows(ctx)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'complete', HELLO],
    ]);
  });

  it('an error chunk before any token on every attempt fails as server_error with retry_count = max_retries', async () => {
    const ctx = await setup([ERROR_FIRST, ERROR_FIRST, { fixture: 'openai-text.sse' }], { max_retries: 1 });
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(shape(events)).toEqual([...HEAD, ...FAILED_TAIL]);
    expectOneMessage(events);
    const failed = one(events, 'llm.call_failed');
    expect(failed).toMatchObject({ provider: 'openai', error_class: 'server_error', retry_count: 1 });
    expect(failed.error_message_redacted).toContain('overloaded');
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'cancelled', final_content: [] });
    expect(rows(ctx)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'error', []],
    ]);
  });

  it('a 429 with retry-after is retried after the wait; beyond max_retries it fails with retry_count 1', async () => {
    const limited: ReplayResponse = {
      status: 429,
      headers: { 'retry-after': '1' },
      json: {
        error: { message: 'Rate limit reached', type: 'requests', param: null, code: 'rate_limit_exceeded' },
      },
    };
    const ctx = await setup([limited, { fixture: 'openai-text.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(ctx.server.requests[1]!.receivedAt - ctx.server.requests[0]!.receivedAt).toBeGreaterThanOrEqual(
      950,
    );
    expect(shape(events)).toEqual(TEXT_TURN);
    expectOneMessage(events);
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'end_turn', final_content: HELLO });
    expect(byType(events, 'llm.call_failed')).toHaveLength(0);
    // The rejected attempt left nothing in the store: one complete answer.
    expect(rows(ctx)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'complete', HELLO],
    ]);

    const quick = { ...limited, headers: { 'retry-after': '0' } };
    const again = await setup([quick, quick, quick], { max_retries: 1 });
    const failed = await turn(again, 'Say hello');
    expect(failed.outcome.status).toBe('failed');
    expect(shape(failed.events)).toEqual([...HEAD, ...FAILED_TAIL]);
    expect(one(failed.events, 'llm.call_failed')).toMatchObject({
      error_class: 'rate_limit',
      retry_count: 1,
    });
    expect(one(failed.events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [],
    });
    expect(again.server.requests).toHaveLength(2);
    expect(rows(again)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'error', []],
    ]);
  });

  it('HTTP errors map to auth and context_overflow without retries', async () => {
    // No cool-down: the auth error's outage would otherwise keep the second call from being made.
    const config = (url: string): RuntimeConfigInput => ({
      default_model: MODEL,
      providers: { openai: { base_url: `${url}/v1`, api_key: KEY } },
      pricing: { 'openai:*': PRICE },
      provider_health: { cooldown_seconds: 0 },
    });
    const ctx = await setup(
      [
        {
          status: 401,
          json: {
            error: {
              message: `Incorrect API key provided: ${KEY}`,
              type: 'invalid_request_error',
              code: 'invalid_api_key',
            },
          },
        },
        {
          status: 400,
          json: {
            error: {
              message: "This model's maximum context length is 128000 tokens.",
              type: 'invalid_request_error',
              code: 'context_length_exceeded',
            },
          },
        },
      ],
      {},
      config,
    );
    const first = await turn(ctx, 'Hello');
    expect(first.outcome.status).toBe('failed');
    expect(shape(first.events)).toEqual([...HEAD, ...FAILED_TAIL, 'routing.provider_unavailable']);
    const auth = one(first.events, 'llm.call_failed');
    expect(auth).toMatchObject({ provider: 'openai', error_class: 'auth', retry_count: 0 });
    expect(auth.error_message_redacted).not.toContain(KEY);
    const second = await turn(ctx, 'Hello again');
    expect(second.outcome.status).toBe('failed');
    expect(shape(second.events)).toEqual([
      ...HEAD,
      ...FAILED_TAIL,
      'routing.provider_unavailable',
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      ...FAILED_TAIL,
    ]);
    expect(one(second.events, 'llm.call_failed', 1)).toMatchObject({
      error_class: 'context_overflow',
      retry_count: 0,
    });
    expect(byType(second.events, 'message.complete').map((e) => e.payload)).toMatchObject([
      { stop_reason: 'cancelled', final_content: [] },
      { stop_reason: 'cancelled', final_content: [] },
    ]);
    expect(ctx.server.requests).toHaveLength(2);
    expect(JSON.stringify(ctx.h.frames)).not.toContain(KEY);
    expect(rows(ctx)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Hello' }]],
      ['assistant', 'error', []],
      ['user', 'complete', [{ type: 'text', text: 'Hello again' }]],
      ['assistant', 'error', []],
    ]);
  });

  it('a stream cut off without a finish_reason fails as network, keeping the partial text', async () => {
    const ctx = await setup([{ fixture: 'openai-cut-off.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say something');
    expect(outcome.status).toBe('failed');
    expect(shape(events)).toEqual([...HEAD, 'text.delta*', ...FAILED_TAIL]);
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'network', retry_count: 0 });
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'Half of an answer' }],
    });
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId)[1]).toMatchObject({
      status: 'error',
      content: [{ type: 'text', text: 'Half of an answer' }],
    });
  });

  it('abort mid-stream closes the HTTP connection and ends with the §6.2.1 sequence', async () => {
    // The first two chunks, then the server goes quiet.
    const ctx = await setup([{ fixture: 'openai-text.sse', hangAfter: 2 }]);
    ctx.h.runtime.streaming.subscribe((event) => {
      if (event.type === 'text.delta') ctx.h.runtime.cancelTurn(ctx.sessionId, event.turn_id!);
    });
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('cancelled');
    expect(await ctx.server.outcome(0)).toBe('client_closed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'message.complete',
      'llm.call_failed',
      'turn.cancelled',
    ]);
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'Hello' }],
    });
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'cancelled', retry_count: 0 });
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId)[1]).toMatchObject({
      status: 'cancelled',
      content: [{ type: 'text', text: 'Hello' }],
    });
  });

  it('abort mid-tool-arguments closes both open calls with what parsed and dispatches nothing', async () => {
    // Up to the `{"path":` fragment of the second call.
    const ctx = await setup([{ fixture: 'openai-tool-calls.sse', hangAfter: 5 }]);
    let deltas = 0;
    ctx.h.runtime.streaming.subscribe((event) => {
      if (event.type === 'tool.use_input_delta' && ++deltas === 2) {
        ctx.h.runtime.cancelTurn(ctx.sessionId, event.turn_id!);
      }
    });
    const { outcome, events } = await turn(ctx, 'Time and notes, please');
    expect(outcome.status).toBe('cancelled');
    expect(await ctx.server.outcome(0)).toBe('client_closed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'tool.use_end',
      'message.complete',
      'llm.call_failed',
      'turn.cancelled',
    ]);
    expectOneMessage(events);
    expect(byType(events, 'tool.use_end').map((e) => [e.payload.tool_use_id, e.payload.final_input])).toEqual(
      [
        ['call_Clock', {}],
        ['call_Notes', {}],
      ],
    );
    const partial = [
      { type: 'text', text: 'Checking both.' },
      { type: 'tool_use', id: 'call_Clock', name: 'current_time', input: {} },
      { type: 'tool_use', id: 'call_Notes', name: 'read_file', input: {} },
    ];
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: partial,
    });
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'cancelled', retry_count: 0 });
    expect(one(events, 'turn.cancelled')).toMatchObject({ reason: 'user_cancel', partial_llm_calls: 1 });
    expect(byType(events, 'tool.called')).toHaveLength(0);
    // The store holds the partial message as cancelled, with both calls, and no tool message or tool call.
    expect(rows(ctx)).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Time and notes, please' }]],
      ['assistant', 'cancelled', partial],
    ]);
    const toolCalls = ctx.h.context.db
      .prepare('SELECT id FROM tool_calls WHERE session_id = ?')
      .all(ctx.sessionId);
    expect(toolCalls).toEqual([]);
  });

  it('an openai-compatible local server (ollama) needs no key', async () => {
    const ctx = await setup([{ fixture: 'openai-text.sse' }], {}, (url) => ({
      default_model: 'ollama:llama3.2:3b',
      providers: { ollama: { kind: 'openai-compatible', base_url: `${url}/v1` } },
    }));
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(shape(events)).toEqual(TEXT_TURN);
    expect(one(events, 'llm.call_started')).toMatchObject({
      model: 'ollama:llama3.2:3b',
      provider: 'ollama',
    });
    // Unpriced: costs 0.
    expect(one(events, 'llm.call_completed')).toMatchObject({ cost_usd: 0, input_tokens: 30 });
    expect(ctx.server.requests[0]!.body.model).toBe('llama3.2:3b');
    expect(ctx.server.requests[0]!.headers.authorization).toBe('Bearer metis-no-key');
  });
});
