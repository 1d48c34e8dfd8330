import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';
import { startUpstream, type Upstream } from './replay-upstream.js';

let upstream: Upstream;
let rig: GatewayRig;
let openai: OpenAI;
let anthropic: Anthropic;

const SAMPLING_FIELDS = ['max_tokens', 'temperature', 'top_p', 'stop', 'stop_sequences'];

/** The output cap and sampling fields of the request the fake provider got (request `i`). */
function samplingSent(i: number): Record<string, unknown> {
  const body = upstream.requests[i]!.body as Record<string, unknown>;
  return Object.fromEntries(Object.entries(body).filter(([field]) => SAMPLING_FIELDS.includes(field)));
}

describe("gateway: the client's max_tokens and sampling reach the provider", () => {
  beforeAll(async () => {
    upstream = await startUpstream([
      'openai-text.sse',
      'anthropic-text.sse',
      'openai-text.sse',
      'anthropic-text.sse',
      'openai-text.sse',
    ]);
    rig = await startGatewayRig({
      runtime: {
        providers: {
          anthropic: { kind: 'anthropic', base_url: upstream.url, api_key: 'sk-ant-test' },
          openai: { base_url: `${upstream.url}/v1`, api_key: 'sk-test' },
        },
      },
    });
    const key = rig.issue();
    openai = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: key.secret, baseURL: rig.url, maxRetries: 0 });
  });
  afterAll(async () => {
    await rig.close();
    await upstream.close();
  });

  it('OpenAI chat to OpenAI: max_completion_tokens, temperature, top_p and stop', async () => {
    const stream = await openai.chat.completions.create({
      model: 'openai:gpt-test',
      messages: [{ role: 'user', content: 'say hello' }],
      stream: true,
      max_completion_tokens: 77,
      temperature: 0.3,
      top_p: 0.9,
      stop: 'END',
    });
    for await (const _ of stream);
    expect(samplingSent(0)).toEqual({ max_tokens: 77, temperature: 0.3, top_p: 0.9, stop: ['END'] });
  });

  it('Anthropic messages: max_tokens and stop_sequences to Anthropic, and sampling to OpenAI', async () => {
    // Older Anthropic clients send temperature and top_p; this SDK's types no longer have them.
    const ask = {
      max_tokens: 99,
      temperature: 0.5,
      top_p: 0.8,
      stop_sequences: ['###', 'END'],
      messages: [{ role: 'user' as const, content: 'say hello' }],
    } as Omit<Anthropic.MessageCreateParamsNonStreaming, 'model'>;
    await anthropic.messages.create({ ...ask, model: 'anthropic:claude-test' });
    // The Messages API takes no temperature or top_p: the adapter does not send them.
    expect(samplingSent(1)).toEqual({ max_tokens: 99, stop_sequences: ['###', 'END'] });
    await anthropic.messages.create({ ...ask, model: 'openai:gpt-test' });
    expect(samplingSent(2)).toEqual({ max_tokens: 99, temperature: 0.5, top_p: 0.8, stop: ['###', 'END'] });
  });

  it("OpenAI Responses to Anthropic: max_output_tokens is Anthropic's max_tokens", async () => {
    await openai.responses.create({
      model: 'anthropic:claude-test',
      input: 'say hello',
      max_output_tokens: 55,
      temperature: 0.2,
    });
    expect(samplingSent(3)).toEqual({ max_tokens: 55 });
  });

  it("a request that asks for none gets the provider's defaults; a field of the wrong type is a 400", async () => {
    await openai.chat.completions.create({
      model: 'openai:gpt-test',
      messages: [{ role: 'user', content: 'say hello' }],
    });
    expect(samplingSent(4)).toEqual({});
    // The OpenAI adapter's connection was kept between its calls (openai-stream.ts's keep-alive agent).
    expect(upstream.requests[4]!.port).toBe(upstream.requests[0]!.port);
    const refused = await openai.chat.completions
      .create({
        model: 'openai:gpt-test',
        messages: [{ role: 'user', content: 'say hello' }],
        temperature: 'warm' as unknown as number,
      })
      .catch((error) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused.param).toBe('temperature');
    const stop = await anthropic.messages
      .create({
        model: 'anthropic:claude-test',
        max_tokens: 10,
        stop_sequences: [7] as unknown as string[],
        messages: [{ role: 'user', content: 'say hello' }],
      })
      .catch((error) => error);
    expect(stop).toBeInstanceOf(Anthropic.BadRequestError);
    expect(upstream.requests).toHaveLength(5);
  });
});
