import { describe, expect, it } from 'vitest';
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

/** Deliberately not `sk-…`-shaped, so only the adapter's own scrubbing can hide it. */
const KEY = 'test-key-4f9a8b7c6d5e3a21';
const MODEL = 'anthropic:claude-test';
const PRICE = {
  input_per_mtok: 3,
  output_per_mtok: 15,
  cached_input_per_mtok: 0.3,
  cache_creation_per_mtok: 3.75,
};

function setup(responses: ReplayResponse[], provider: Record<string, unknown> = {}): Promise<Context> {
  return startProviderContext(responses, (url) => ({
    default_model: MODEL,
    providers: { anthropic: { kind: 'anthropic', base_url: url, api_key: KEY, ...provider } },
    pricing: { 'anthropic:*': PRICE },
  }));
}

const HELLO = [{ type: 'text', text: 'Hello from Claude.' }];
const OVERLOADED_FIRST: ReplayResponse = { fixture: 'anthropic-overloaded-first.sse' };

/** The assistant message rows of a session as [status, content], in order. */
const assistantRows = (ctx: Context) =>
  ctx.h.runtime.sessions
    .messages(ctx.sessionId)
    .filter((m) => m.role === 'assistant')
    .map((m) => [m.status, m.content]);

describe('anthropic adapter through @anthropic-ai/sdk against a replay server', () => {
  it('plain text: deltas, usage with cache read/creation, cost, request shape, persisted message', async () => {
    const ctx = await setup([
      { fixture: 'anthropic-text.sse', headers: { 'request-id': 'req_011anthropic' } },
    ]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(one(events, 'route.decided')).toMatchObject({ chosen_model: MODEL, winner_index: 6 });
    expect(one(events, 'llm.call_started')).toMatchObject({ model: MODEL, provider: 'anthropic' });
    expect(texts(events, 'text.delta')).toEqual(['Hello', ' from', ' Claude.']);
    expect(byType(events, 'text.delta').every((e) => e.payload.content_block_index === 0)).toBe(true);
    const usage = {
      input_tokens: 25,
      output_tokens: 12,
      cached_input_tokens: 100,
      cache_creation_input_tokens: 20,
      // (25×3 + 12×15 + 100×0.3 + 20×3.75) / 1e6
      cost_usd: 0.00036,
      pricing_version: '2026-11-01',
    };
    expect(one(events, 'message.complete')).toEqual({
      message_id: expect.any(String),
      stop_reason: 'end_turn',
      final_content: [{ type: 'text', text: 'Hello from Claude.' }],
      usage,
    });
    expect(one(events, 'llm.call_completed')).toMatchObject({
      ...usage,
      model: MODEL,
      provider: 'anthropic',
      provider_request_id: 'req_011anthropic', // the provider's, beside metis's own on llm.call_started
      stop_reason: 'end_turn',
      produced_tool_calls: 0,
      produced_thinking_blocks: 0,
    });
    expect(one(events, 'turn.completed')).toMatchObject({
      stop_reason: 'end_turn',
      total_input_tokens: 25,
      total_output_tokens: 12,
      total_cost_usd: 0.00036,
    });

    const [request] = ctx.server.requests;
    expect(ctx.server.requests).toHaveLength(1);
    expect(request!.path).toBe('/v1/messages');
    // The SDK sends the key as x-api-key or, in recent versions, as a bearer token.
    expect(`${request!.headers['x-api-key'] ?? ''} ${request!.headers.authorization ?? ''}`).toContain(KEY);
    expect(request!.headers['anthropic-version']).toBeDefined();
    expect(request!.body).toMatchObject({
      model: 'claude-test',
      stream: true,
      max_tokens: 8192,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Say hello' }] }],
    });
    expect(request!.body.thinking).toBeUndefined();
    const readFile = request!.body.tools.find((t: { name: string }) => t.name === 'read_file');
    expect(readFile.input_schema).toMatchObject({ type: 'object', required: ['path'] });
    expect(readFile.input_schema.$schema).toBeUndefined();

    const messages = ctx.h.runtime.sessions.messages(ctx.sessionId);
    expect(messages.map((m) => [m.role, m.status])).toEqual([
      ['user', 'complete'],
      ['assistant', 'complete'],
    ]);
    expect(messages[1]).toMatchObject({
      model: MODEL,
      content: [{ type: 'text', text: 'Hello from Claude.' }],
      usage,
    });
  });

  it('thinking + redacted thinking + text: the signature rides on the last thinking delta of its block', async () => {
    const ctx = await setup([{ fixture: 'anthropic-thinking.sse' }], { thinking_budget_tokens: 2048 });
    const { events } = await turn(ctx, 'Why is the sky blue?');
    expect(shape(events)).toEqual([
      ...HEAD,
      'thinking.delta*',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    const signature = 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds';
    const thinking = byType(events, 'thinking.delta').map((e) => e.payload);
    expect(thinking.map((p) => [p.content_block_index, p.text, p.signature])).toEqual([
      [0, 'The sky scatters short', null],
      [0, ' wavelengths more.', null],
      [0, '', signature],
      // redacted thinking: a delta without readable text; its data arrives in message.complete
      [1, '', null],
    ]);
    expect(byType(events, 'text.delta').every((e) => e.payload.content_block_index === 2)).toBe(true);
    const finalContent = [
      { type: 'thinking', thinking: 'The sky scatters short wavelengths more.', signature },
      { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP' },
      { type: 'text', text: 'Rayleigh scattering makes it blue.' },
    ];
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'end_turn',
      final_content: finalContent,
    });
    expect(one(events, 'llm.call_completed')).toMatchObject({
      input_tokens: 40,
      output_tokens: 58,
      cached_input_tokens: 0,
      cache_creation_input_tokens: 0,
      cost_usd: 0.00099,
      produced_thinking_blocks: 2,
    });
    expect(ctx.server.requests[0]!.body).toMatchObject({
      thinking: { type: 'enabled', budget_tokens: 2048 },
      max_tokens: 8192,
    });
    const assistant = ctx.h.runtime.sessions.messages(ctx.sessionId)[1]!;
    expect(assistant).toMatchObject({ role: 'assistant', status: 'complete', content: finalContent });
  });

  it('one tool use: input_json_delta → tool.use_input_delta, parsed final_input, tool_result sent back', async () => {
    const ctx = await setup([
      { fixture: 'anthropic-tool-use.sse' },
      { fixture: 'anthropic-tool-answer.sse' },
    ]);
    const { outcome, events } = await turn(ctx, 'What do my notes say?');
    expect(outcome.status).toBe('completed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
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
      content_block_index: 1,
      tool_use_id: 'toolu_01ReadNotes',
      tool_name: 'read_file',
    });
    expect(byType(events, 'tool.use_input_delta').map((e) => e.payload.partial_json)).toEqual([
      '{"pa',
      'th": "no',
      'tes.txt"}',
    ]);
    expect(one(events, 'tool.use_end')).toMatchObject({
      tool_use_id: 'toolu_01ReadNotes',
      final_input: { path: 'notes.txt' },
    });
    expect(one(events, 'llm.call_completed')).toMatchObject({
      stop_reason: 'tool_use',
      produced_tool_calls: 1,
      input_tokens: 310,
      output_tokens: 45,
    });
    expect(one(events, 'tool.called')).toMatchObject({
      tool_use_id: 'toolu_01ReadNotes',
      tool_name: 'read_file',
    });
    expect(one(events, 'llm.call_completed', 1)).toMatchObject({ stop_reason: 'end_turn', output_tokens: 6 });
    expect(one(events, 'turn.completed')).toMatchObject({
      llm_call_count: 2,
      tool_call_count: 1,
      total_input_tokens: 710,
      total_output_tokens: 51,
    });

    // The second call carries the assistant turn and the result as a user message of tool_result blocks.
    const second = ctx.server.requests[1]!.body;
    expect(second.messages).toHaveLength(3);
    expect(second.messages[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me read the file.' },
        { type: 'tool_use', id: 'toolu_01ReadNotes', name: 'read_file', input: { path: 'notes.txt' } },
      ],
    });
    expect(second.messages[2].role).toBe('user');
    expect(second.messages[2].content).toEqual([
      {
        type: 'tool_result',
        tool_use_id: 'toolu_01ReadNotes',
        content: expect.stringContaining('hello from the notes'),
      },
    ]);

    const messages = ctx.h.runtime.sessions.messages(ctx.sessionId);
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(messages[1]!.content).toEqual([
      { type: 'text', text: 'Let me read the file.' },
      { type: 'tool_use', id: 'toolu_01ReadNotes', name: 'read_file', input: { path: 'notes.txt' } },
    ]);
    expect(messages[3]!.content).toEqual([{ type: 'text', text: 'The notes say hello.' }]);
  });

  it('several tool uses in one message: each starts, streams and ends at its own block index', async () => {
    const ctx = await setup([
      { fixture: 'anthropic-tool-uses.sse' },
      { fixture: 'anthropic-tool-answer.sse' },
    ]);
    const { events } = await turn(ctx, 'Time and notes, please');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'tool.use_start',
      'tool.use_end',
      'tool.use_start',
      'tool.use_input_delta*',
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
    expect(byType(events, 'tool.use_end').map((e) => e.payload)).toEqual([
      expect.objectContaining({ content_block_index: 1, tool_use_id: 'toolu_01Clock', final_input: {} }),
      expect.objectContaining({
        content_block_index: 2,
        tool_use_id: 'toolu_01Notes',
        final_input: { path: 'notes.txt' },
      }),
    ]);
    expect(one(events, 'llm.call_completed')).toMatchObject({
      stop_reason: 'tool_use',
      produced_tool_calls: 2,
    });
    const results = ctx.server.requests[1]!.body.messages[2].content;
    expect(results.map((r: { tool_use_id: string }) => r.tool_use_id)).toEqual([
      'toolu_01Clock',
      'toolu_01Notes',
    ]);
    const messages = ctx.h.runtime.sessions.messages(ctx.sessionId);
    expect(messages[1]!.content).toEqual([
      { type: 'text', text: 'Checking both.' },
      { type: 'tool_use', id: 'toolu_01Clock', name: 'current_time', input: {} },
      { type: 'tool_use', id: 'toolu_01Notes', name: 'read_file', input: { path: 'notes.txt' } },
    ]);
  });

  it('an overloaded_error event inside a 200 stream is server_error, not retried after the first token', async () => {
    const ctx = await setup([{ fixture: 'anthropic-overloaded.sse' }, { fixture: 'anthropic-text.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say something');
    expect(outcome.status).toBe('failed');
    expect(shape(events)).toEqual([...HEAD, 'text.delta*', ...FAILED_TAIL]);
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'I was about to say' }],
    });
    const failed = one(events, 'llm.call_failed');
    expect(failed).toMatchObject({
      model: MODEL,
      provider: 'anthropic',
      error_class: 'server_error',
      retry_count: 0,
    });
    expect(failed.error_message_redacted).toContain('Overloaded');
    expect(ctx.server.requests).toHaveLength(1);
    const assistant = ctx.h.runtime.sessions.messages(ctx.sessionId)[1]!;
    expect(assistant).toMatchObject({
      status: 'error',
      content: [{ type: 'text', text: 'I was about to say' }],
    });
  });

  it('a 429 with retry-after is retried after the wait the provider asked for, invisibly on the wire', async () => {
    const ctx = await setup([
      {
        status: 429,
        headers: { 'retry-after': '1' },
        json: { type: 'error', error: { type: 'rate_limit_error', message: 'Number of requests exceeded' } },
      },
      { fixture: 'anthropic-text.sse' },
    ]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(ctx.server.requests[1]!.receivedAt - ctx.server.requests[0]!.receivedAt).toBeGreaterThanOrEqual(
      950,
    );
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    expect(one(events, 'message.complete').final_content).toEqual(HELLO);
    expectOneMessage(events);
    expect(byType(events, 'llm.call_failed')).toHaveLength(0);
    // The rejected attempt left nothing in the store: one complete answer.
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId).map((m) => [m.role, m.status, m.content])).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'complete', HELLO],
    ]);
  });

  it('429s beyond max_retries fail as rate_limit with retry_count 1', async () => {
    const limited: ReplayResponse = {
      status: 429,
      headers: { 'retry-after': '0' },
      json: { type: 'error', error: { type: 'rate_limit_error', message: 'Number of requests exceeded' } },
    };
    const ctx = await setup([limited, limited, { fixture: 'anthropic-text.sse' }], { max_retries: 1 });
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(shape(events)).toEqual([...HEAD, ...FAILED_TAIL]);
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'rate_limit', retry_count: 1 });
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'cancelled', final_content: [] });
    expect(assistantRows(ctx)).toEqual([['error', []]]);
  });

  it('a 401 is auth, never retried, and the key never reaches the trace', async () => {
    const ctx = await setup([
      {
        status: 401,
        json: { type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${KEY}` } },
        headers: { 'request-id': 'req_011denied' },
      },
    ]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    // An auth error takes the provider out of routing (bus §6.4), announced after the turn's events.
    expect(shape(events)).toEqual([...HEAD, ...FAILED_TAIL, 'routing.provider_unavailable']);
    expect(one(events, 'routing.provider_unavailable')).toMatchObject({
      provider: 'anthropic',
      scope: 'provider_wide',
      trigger_reason: 'auth_error',
    });
    const failed = one(events, 'llm.call_failed');
    expect(failed).toMatchObject({
      model: MODEL,
      provider: 'anthropic',
      provider_request_id: 'req_011denied',
      error_class: 'auth',
      retry_count: 0,
    });
    expect(failed.error_message_redacted).toContain('invalid x-api-key [key]');
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'cancelled', final_content: [] });
    expect(JSON.stringify(ctx.h.frames)).not.toContain(KEY);
    expect(ctx.server.requests).toHaveLength(1);
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId).map((m) => [m.role, m.status, m.content])).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'Say hello' }]],
      ['assistant', 'error', []],
    ]);
  });

  it('a 400 "prompt is too long" is context_overflow; other 400s are invalid_request', async () => {
    const ctx = await setup([
      {
        status: 400,
        json: {
          type: 'error',
          error: {
            type: 'invalid_request_error',
            message: 'prompt is too long: 210000 tokens > 200000 maximum',
          },
        },
      },
      {
        status: 400,
        json: {
          type: 'error',
          error: { type: 'invalid_request_error', message: 'messages: field required' },
        },
      },
    ]);
    const first = await turn(ctx, 'A very long prompt');
    expect(first.outcome.status).toBe('failed');
    expect(shape(first.events)).toEqual([...HEAD, ...FAILED_TAIL]);
    expect(one(first.events, 'llm.call_failed')).toMatchObject({
      error_class: 'context_overflow',
      retry_count: 0,
    });
    const second = await turn(ctx, 'Another');
    expect(second.outcome.status).toBe('failed');
    expect(shape(second.events)).toEqual([
      ...HEAD,
      ...FAILED_TAIL,
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      ...FAILED_TAIL,
    ]);
    expect(one(second.events, 'llm.call_failed', 1)).toMatchObject({
      error_class: 'invalid_request',
      retry_count: 0,
    });
    expect(byType(second.events, 'message.complete').map((e) => e.payload)).toMatchObject([
      { stop_reason: 'cancelled', final_content: [] },
      { stop_reason: 'cancelled', final_content: [] },
    ]);
    expect(ctx.server.requests).toHaveLength(2);
    expect(ctx.h.runtime.sessions.messages(ctx.sessionId).map((m) => [m.role, m.status, m.content])).toEqual([
      ['user', 'complete', [{ type: 'text', text: 'A very long prompt' }]],
      ['assistant', 'error', []],
      ['user', 'complete', [{ type: 'text', text: 'Another' }]],
      ['assistant', 'error', []],
    ]);
  });

  it('a 529 before the first token is retried with backoff', async () => {
    const ctx = await setup([
      { status: 529, json: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
      { fixture: 'anthropic-text.sse' },
    ]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('completed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(ctx.server.requests[1]!.body).toEqual(ctx.server.requests[0]!.body);
    expect(shape(events)).toEqual(TEXT_TURN);
    expectOneMessage(events);
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'end_turn', final_content: HELLO });
    expect(byType(events, 'llm.call_failed')).toHaveLength(0);
    expect(assistantRows(ctx)).toEqual([['complete', HELLO]]);
  });

  it('an overloaded_error right after message_start (before any token) is retried: one message reaches the client', async () => {
    const ctx = await setup([OVERLOADED_FIRST, { fixture: 'anthropic-text.sse' }]);
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
    expect(texts(events, 'text.delta')).toEqual(['Hello', ' from', ' Claude.']);
    // Usage is the second attempt's (the failed one announced input_tokens 99).
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'end_turn',
      final_content: HELLO,
      usage: { input_tokens: 25, output_tokens: 12, cached_input_tokens: 100 },
    });
    // llm.call_completed has no retry_count (bus §6.3): a retry that succeeds is invisible.
    expect(one(events, 'llm.call_completed')).toMatchObject({ stop_reason: 'end_turn', input_tokens: 25 });
    expect(assistantRows(ctx)).toEqual([['complete', HELLO]]);
  });

  it('overloaded_error before any token on every attempt fails as server_error with retry_count = max_retries', async () => {
    const ctx = await setup([OVERLOADED_FIRST, OVERLOADED_FIRST, { fixture: 'anthropic-text.sse' }], {
      max_retries: 1,
    });
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    expect(ctx.server.requests).toHaveLength(2);
    expect(shape(events)).toEqual([...HEAD, ...FAILED_TAIL]);
    expectOneMessage(events);
    const failed = one(events, 'llm.call_failed');
    expect(failed).toMatchObject({ provider: 'anthropic', error_class: 'server_error', retry_count: 1 });
    expect(failed.error_message_redacted).toContain('Overloaded');
    expect(one(events, 'message.complete')).toMatchObject({ stop_reason: 'cancelled', final_content: [] });
    expect(assistantRows(ctx)).toEqual([['error', []]]);
  });

  it('a stream cut off without message_stop fails as network, keeping the partial text', async () => {
    const ctx = await setup([{ fixture: 'anthropic-cut-off.sse' }]);
    const { outcome, events } = await turn(ctx, 'Say something');
    expect(outcome.status).toBe('failed');
    expect(shape(events)).toEqual([...HEAD, 'text.delta*', ...FAILED_TAIL]);
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'network', retry_count: 0 });
    expect(one(events, 'llm.call_failed').error_message_redacted).toContain('message_stop');
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'Half of an answer' }],
    });
    const assistant = ctx.h.runtime.sessions.messages(ctx.sessionId)[1]!;
    expect(assistant).toMatchObject({
      status: 'error',
      content: [{ type: 'text', text: 'Half of an answer' }],
    });
  });

  it('a connection dropped mid-stream fails as network', async () => {
    // message_start, content_block_start, ping, the "Hello" delta — then the socket is destroyed.
    const ctx = await setup([{ fixture: 'anthropic-text.sse', dropAfter: 4 }]);
    const { outcome, events } = await turn(ctx, 'Say hello');
    expect(outcome.status).toBe('failed');
    expect(shape(events)).toEqual([...HEAD, 'text.delta*', ...FAILED_TAIL]);
    expectOneMessage(events);
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'network', retry_count: 0 });
    expect(await ctx.server.outcome(0)).toBe('dropped');
    // Not retried: a token had already reached the loop.
    expect(ctx.server.requests).toHaveLength(1);
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [{ type: 'text', text: 'Hello' }],
    });
    expect(assistantRows(ctx)).toEqual([['error', [{ type: 'text', text: 'Hello' }]]]);
  });

  it('abort mid-text closes the HTTP connection and ends with the §6.2.1 sequence', async () => {
    // message_start, content_block_start, ping, the first delta — then the server goes quiet.
    const ctx = await setup([{ fixture: 'anthropic-text.sse', hangAfter: 4 }]);
    let cancelled = false;
    const unsubscribe = ctx.h.runtime.streaming.subscribe((event) => {
      if (event.type === 'text.delta' && !cancelled) {
        cancelled = true;
        ctx.h.runtime.cancelTurn(ctx.sessionId, event.turn_id!);
      }
    });
    const { outcome, events } = await turn(ctx, 'Say hello');
    unsubscribe?.();
    expect(outcome.status).toBe('cancelled');
    // The server saw the client close the connection before its stream was over.
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
    expect(one(events, 'turn.cancelled')).toMatchObject({ reason: 'user_cancel', partial_llm_calls: 1 });
    const assistant = ctx.h.runtime.sessions.messages(ctx.sessionId)[1]!;
    expect(assistant).toMatchObject({ status: 'cancelled', content: [{ type: 'text', text: 'Hello' }] });
  });

  it('abort mid-tool-input closes the open tool use with {} and dispatches nothing', async () => {
    // Up to the `{"pa` fragment of the read_file input, then silence.
    const ctx = await setup([{ fixture: 'anthropic-tool-use.sse', hangAfter: 8 }]);
    ctx.h.runtime.streaming.subscribe((event) => {
      if (event.type === 'tool.use_input_delta') ctx.h.runtime.cancelTurn(ctx.sessionId, event.turn_id!);
    });
    const { outcome, events } = await turn(ctx, 'What do my notes say?');
    expect(outcome.status).toBe('cancelled');
    expect(await ctx.server.outcome(0)).toBe('client_closed');
    expect(shape(events)).toEqual([
      ...HEAD,
      'text.delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'message.complete',
      'llm.call_failed',
      'turn.cancelled',
    ]);
    expect(one(events, 'tool.use_end')).toMatchObject({ tool_use_id: 'toolu_01ReadNotes', final_input: {} });
    expect(one(events, 'message.complete')).toMatchObject({
      stop_reason: 'cancelled',
      final_content: [
        { type: 'text', text: 'Let me read the file.' },
        { type: 'tool_use', id: 'toolu_01ReadNotes', name: 'read_file', input: {} },
      ],
    });
    expect(byType(events, 'tool.called')).toHaveLength(0);
    expect(one(events, 'llm.call_failed')).toMatchObject({ error_class: 'cancelled' });
    expect(assistantRows(ctx)).toEqual([
      [
        'cancelled',
        [
          { type: 'text', text: 'Let me read the file.' },
          { type: 'tool_use', id: 'toolu_01ReadNotes', name: 'read_file', input: {} },
        ],
      ],
    ]);
    expect(
      ctx.h.context.db.prepare('SELECT id FROM tool_calls WHERE session_id = ?').all(ctx.sessionId),
    ).toEqual([]);
  });
});
