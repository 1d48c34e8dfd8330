import Anthropic from '@anthropic-ai/sdk';
import { EventSource } from 'eventsource';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

let rig: GatewayRig;
let key: { id: string; secret: string };

async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('gateway: a request as a live session, cancelled by its client, and failures in the SDK shapes', () => {
  beforeAll(async () => {
    // `slow:` streams 80 tokens 10 ms apart: long enough to watch and to hang up on.
    rig = await startGatewayRig({
      runtime: { scripted: { slow_token_delay_ms: 10, slow_tokens: 80 } },
      authThrottle: { maxFailures: 2, baseDelayMs: 60_000 },
    });
    key = rig.issue();
  });
  afterAll(() => rig.close());

  it('names its session in metis-session-id, and the session can be watched live over SSE', async () => {
    const client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'scripted:demo', stream: true, messages: [{ role: 'user', content: 'slow: rivers' }] })
      .withResponse();
    const sessionId = response.headers.get('metis-session-id')!;
    expect(sessionId).toMatch(/^sess_/);
    const watched: MetisEvent[] = [];
    const source = new EventSource(`${rig.url}/sessions/${sessionId}/events`);
    source.onmessage = (message) => watched.push(JSON.parse(message.data).event);
    try {
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text.startsWith('Slowly about rivers:')).toBe(true);
      await until(() => watched.some((e) => e.type === 'turn.completed'), 'the watched turn to complete');
      expect(watched.some((e) => e.type === 'text.delta')).toBe(true);
      expect(watched.find((e) => e.type === 'llm.call_completed')!.payload.gateway_key_id).toBe(key.id);
    } finally {
      source.close();
    }
  });

  it('a client that hangs up mid-stream cancels the turn (client_disconnect)', async () => {
    const abort = new AbortController();
    const response = await fetch(`${rig.url}/v1/chat/completions`, {
      method: 'POST',
      signal: abort.signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({
        model: 'scripted:demo',
        stream: true,
        messages: [{ role: 'user', content: 'slow: hang up' }],
      }),
    });
    const sessionId = response.headers.get('metis-session-id')!;
    const reader = response.body!.getReader();
    await reader.read();
    abort.abort();
    await until(
      async () => (await rig.storedOf('turn.cancelled')).some((e) => e.session_id === sessionId),
      'turn.cancelled',
    );
    const cancelled = (await rig.storedOf('turn.cancelled')).find((e) => e.session_id === sessionId)!;
    expect(cancelled.payload.reason).toBe('client_disconnect');
    const ended = (await rig.storedOf('session.ended')).some((e) => e.session_id === sessionId);
    expect(ended).toBe(true);
  });

  it("a provider's failure reaches the client as its SDK's error, and llm.call_failed is recorded", async () => {
    const openai = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    const ask = (content: string) =>
      openai.chat.completions.create({ model: 'scripted:demo', messages: [{ role: 'user', content }] });
    expect(await ask('fail: rate_limit').catch((e) => e)).toBeInstanceOf(OpenAI.RateLimitError);
    expect(await ask('fail: server_error').catch((e) => e)).toBeInstanceOf(OpenAI.InternalServerError);
    const anthropic = new Anthropic({ apiKey: key.secret, baseURL: rig.url, maxRetries: 0 });
    const refused = await anthropic.messages
      .create({
        model: 'scripted:demo',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'fail: invalid_request' }],
      })
      .catch((e) => e);
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    // (The hung-up call before is there too, as cancelled.)
    const failed = (await rig.storedOf('llm.call_failed')).map((e) => e.payload.error_class).slice(-3);
    expect(failed).toEqual(['rate_limit', 'server_error', 'invalid_request']);
  });

  it('slows down an address that keeps sending wrong keys (429), while a right key still passes', async () => {
    const wrong = new OpenAI({
      apiKey: 'mgw_wrong-key-for-the-slow-down',
      baseURL: `${rig.url}/v1`,
      maxRetries: 0,
    });
    const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };
    expect(await wrong.chat.completions.create(ask).catch((e) => e)).toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    expect(await wrong.chat.completions.create(ask).catch((e) => e)).toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    const slowed = await wrong.chat.completions.create(ask).catch((e) => e);
    expect(slowed).toBeInstanceOf(OpenAI.RateLimitError);
    expect(Number(slowed.headers.get('retry-after'))).toBeGreaterThan(0);
    const right = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    expect((await right.chat.completions.create(ask)).choices[0]!.message.content).toBe('You said: hi');
  });
});
