import { describe, expect, it } from 'vitest';
import { RuntimeConfigSchema, runtimeConfig } from '../../../src/core/config/runtime-schema.js';
import type { ConversationMessage } from '../../../src/core/runtime/model-adapter.js';
import { toAnthropicMessages } from '../../../src/core/runtime/models/anthropic.js';
import { MISSING_TOOL_RESULT, pairToolCalls } from '../../../src/core/runtime/models/conversation.js';
import { classifyProviderError, retryAfterOf } from '../../../src/core/runtime/models/error-mapping.js';
import { toOpenAIMessages } from '../../../src/core/runtime/models/openai.js';
import { createProviderAdapter, resolveProviders } from '../../../src/core/runtime/models/providers.js';
import { retryDelayMs } from '../../../src/core/runtime/models/retry.js';
import { byType, startRuntime } from '../../helpers/runtime.js';

describe('provider configuration', () => {
  it('anthropic and openai are built in and read their keys from the environment', () => {
    const providers = resolveProviders(runtimeConfig({}), { ANTHROPIC_API_KEY: ' ant-key-123 ' });
    expect(providers.map((p) => [p.name, p.kind, p.apiKey, p.requiresKey])).toEqual([
      ['anthropic', 'anthropic', 'ant-key-123', true],
      ['openai', 'openai-compatible', null, true],
    ]);
    const [anthropic, openai] = providers.map(createProviderAdapter);
    expect(anthropic!.validate?.('anthropic:claude-sonnet-4-6')).toBeNull();
    expect(openai!.validate?.('openai:gpt-5')).toBe('not_configured');
  });

  it('configured entries merge over the built-ins; api_key wins over api_key_env; local servers need no key', () => {
    const config = runtimeConfig({
      providers: {
        openai: { api_key_env: 'MY_OPENAI_KEY', max_retries: 0 },
        anthropic: { api_key: 'inline-key-1', base_url: 'http://127.0.0.1:9/' },
        ollama: { kind: 'openai-compatible', base_url: 'http://localhost:11434/v1' },
        vllm: { kind: 'openai-compatible', base_url: 'http://gpu:8000/v1', api_key_env: 'VLLM_KEY' },
      },
    });
    const providers = resolveProviders(config, { MY_OPENAI_KEY: 'oa-key', ANTHROPIC_API_KEY: 'ignored' });
    const byName = Object.fromEntries(providers.map((p) => [p.name, p]));
    expect(byName.openai).toMatchObject({ apiKey: 'oa-key', maxRetries: 0 });
    expect(byName.anthropic).toMatchObject({ apiKey: 'inline-key-1', baseUrl: 'http://127.0.0.1:9/' });
    expect(byName.ollama).toMatchObject({ kind: 'openai-compatible', apiKey: null, requiresKey: false });
    expect(createProviderAdapter(byName.ollama!).validate?.('ollama:llama3')).toBeNull();
    // A server whose key variable is unset is not configured.
    expect(createProviderAdapter(byName.vllm!).validate?.('vllm:qwen')).toBe('not_configured');
  });

  it('rejects a custom provider without kind, the name scripted, and non-http base URLs', () => {
    const issues = (providers: unknown) =>
      RuntimeConfigSchema.safeParse({ providers }).error?.issues.map((i) => i.path.join('.')) ?? [];
    expect(issues({ groq: { base_url: 'https://api.groq.com/openai/v1' } })).toEqual(['providers.groq.kind']);
    expect(issues({ scripted: { kind: 'anthropic' } })).toEqual(['providers.scripted']);
    expect(issues({ local: { kind: 'openai-compatible', base_url: 'file:///tmp/x' } })).toEqual([
      'providers.local.base_url',
    ]);
    expect(issues({ Bad_Name: { kind: 'anthropic' } })).toHaveLength(1);
  });

  it('a provider without its key is rejected by routing with not_configured and the chain falls through', async () => {
    const h = startRuntime({ providers: { anthropic: { api_key_env: 'METIS_TEST_UNSET_KEY_VARIABLE' } } });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'hello', { model: 'anthropic:claude-test' });
    await h.settle(done);
    const route = byType(h.framesOf(session.id), 'route.decided')[0]!.payload;
    expect(route).toMatchObject({ chosen_model: 'scripted:demo', winner_index: 6 });
    expect((route.chain as Record<string, unknown>[])[0]).toMatchObject({
      policy: 'per_message_override',
      verdict: 'rejected',
      candidate_model: 'anthropic:claude-test',
      validation_failure: 'not_configured',
    });
  });
});

describe('history sent to providers', () => {
  const history: ConversationMessage[] = [
    { role: 'assistant', content: [{ type: 'text', text: 'cut-off window start' }] },
    { role: 'user', content: [{ type: 'text', text: 'read two files' }] },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'unsigned', signature: null },
        { type: 'text', text: '' },
        { type: 'tool_use', id: 'tu_a', name: 'read_file', input: { path: 'a' } },
        { type: 'tool_use', id: 'tu_b', name: 'read_file', input: { path: 'b' } },
      ],
    },
    // Only one result stored (the turn was cancelled during the second tool).
    { role: 'tool', content: [{ type: 'tool_result', tool_use_id: 'tu_a', content: 'A', is_error: false }] },
    { role: 'user', content: [{ type: 'text', text: 'and now?' }] },
  ];

  it('pairs every tool call with a result and starts at the first user message', () => {
    const paired = pairToolCalls(history);
    expect(paired.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user']);
    expect(paired[2]!.content).toEqual([
      { type: 'tool_result', tool_use_id: 'tu_a', content: 'A', is_error: false },
      { type: 'tool_result', tool_use_id: 'tu_b', content: MISSING_TOOL_RESULT, is_error: true },
    ]);
    // A tool message without its call is dropped.
    expect(pairToolCalls([history[1]!, history[3]!]).map((m) => m.role)).toEqual(['user']);
  });

  it('anthropic: results become a user message merged with the next user text; unsigned thinking and empty text go', () => {
    const messages = toAnthropicMessages(history);
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
    expect(messages[1]!.content).toEqual([
      { type: 'tool_use', id: 'tu_a', name: 'read_file', input: { path: 'a' } },
      { type: 'tool_use', id: 'tu_b', name: 'read_file', input: { path: 'b' } },
    ]);
    expect(messages[2]!.content).toEqual([
      { type: 'tool_result', tool_use_id: 'tu_a', content: 'A' },
      { type: 'tool_result', tool_use_id: 'tu_b', content: MISSING_TOOL_RESULT, is_error: true },
      { type: 'text', text: 'and now?' },
    ]);
  });

  it('openai: a system message, tool_calls on the assistant message, one tool message per result', () => {
    const messages = toOpenAIMessages(history, 'be brief');
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool', 'user']);
    expect(messages[4]).toEqual({
      role: 'tool',
      tool_call_id: 'tu_b',
      content: `Error: ${MISSING_TOOL_RESULT}`,
    });
  });
});

describe('error classes and retry timing', () => {
  class APIError extends Error {
    constructor(
      readonly status: number | undefined,
      message: string,
      readonly headers?: Headers,
      readonly type?: string,
    ) {
      super(message);
    }
  }
  class APIUserAbortError extends APIError {}
  class APIConnectionError extends APIError {}
  const sdk = { APIError, APIUserAbortError, APIConnectionError };
  const classify = (error: unknown, signal = new AbortController().signal) =>
    classifyProviderError(error, { provider: 'p', sdk, signal, secrets: ['secret-key-123'] });

  it('maps statuses, in-stream types and transport failures', () => {
    const cases: [unknown, string, boolean][] = [
      [new APIError(429, 'slow down'), 'rate_limit', true],
      [new APIError(401, 'bad key secret-key-123'), 'auth', false],
      [new APIError(403, 'forbidden'), 'auth', false],
      [new APIError(500, 'boom'), 'server_error', true],
      [new APIError(529, 'Overloaded'), 'server_error', true],
      [new APIError(400, 'prompt is too long: 300000 tokens > 200000 maximum'), 'context_overflow', false],
      [new APIError(400, 'bad field'), 'invalid_request', false],
      [new APIError(404, 'no such model'), 'invalid_request', false],
      [new APIError(undefined, '{"type":"error"}', undefined, 'overloaded_error'), 'server_error', true],
      [new APIError(undefined, 'x', undefined, 'rate_limit_error'), 'rate_limit', true],
      [new APIConnectionError(undefined, 'Connection error.'), 'network', true],
      [Object.assign(new TypeError('terminated'), { cause: { code: 'UND_ERR_SOCKET' } }), 'network', true],
      [new APIUserAbortError(undefined, 'aborted'), 'cancelled', false],
      [new SyntaxError('Unexpected token'), 'other', false],
    ];
    for (const [error, errorClass, retryable] of cases) {
      expect(classify(error)).toMatchObject({ errorClass, retryable });
    }
    expect(classify(new APIError(401, 'bad key secret-key-123')).message).toBe('p: bad key [key]');
    const aborted = new AbortController();
    aborted.abort();
    expect(classify(new APIError(500, 'boom'), aborted.signal).errorClass).toBe('cancelled');
  });

  it('honours retry-after (seconds, date, -ms) and backs off exponentially otherwise', () => {
    expect(retryAfterOf(new Headers({ 'retry-after': '2' }))).toBe(2000);
    expect(retryAfterOf(new Headers({ 'retry-after-ms': '150', 'retry-after': '2' }))).toBe(150);
    const date = retryAfterOf(new Headers({ 'retry-after': new Date(Date.now() + 3000).toUTCString() }));
    expect(date).toBeGreaterThan(1000);
    expect(date).toBeLessThanOrEqual(3000);
    const policy = { maxRetries: 3, baseDelayMs: 500, maxDelayMs: 8000, maxRetryAfterMs: 60_000 };
    const mid = () => 0.5;
    expect([0, 1, 2, 5].map((n) => retryDelayMs(n, null, policy, mid))).toEqual([500, 1000, 2000, 8000]);
    expect(retryDelayMs(0, 1000, policy)).toBe(1000);
    expect(retryDelayMs(0, 120_000, policy)).toBeNull();
  });
});
