import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

let rig: GatewayRig;
let key: { id: string; secret: string };
let client: Anthropic;

const tools: Anthropic.Tool[] = [
  {
    name: 'get_weather',
    description: 'Weather of a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];

describe('gateway: Anthropic messages with the real @anthropic-ai/sdk', () => {
  beforeAll(async () => {
    rig = await startGatewayRig();
    key = rig.issue();
    client = new Anthropic({ apiKey: key.secret, baseURL: rig.url, maxRetries: 0 });
  });
  afterAll(() => rig.close());

  it('answers a plain message, stamped anthropic on llm.call_completed', async () => {
    const message = await client.messages.create({
      model: 'scripted:demo',
      max_tokens: 256,
      system: 'be brief',
      messages: [{ role: 'user', content: 'hello claude' }],
    });
    expect(message.type).toBe('message');
    expect(message.content).toEqual([{ type: 'text', text: 'You said: hello claude', citations: null }]);
    expect(message.stop_reason).toBe('end_turn');
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    const completed = (await rig.storedOf('llm.call_completed')).at(-1)!;
    expect(completed.payload).toMatchObject({
      gateway_key_id: key.id,
      inbound_shape: 'anthropic',
      user_id: null,
    });
  });

  it('streams thinking and text as the SDK assembles them', async () => {
    const stream = client.messages.stream({
      model: 'scripted:demo',
      max_tokens: 256,
      messages: [{ role: 'user', content: 'think: why is the sky blue' }],
    });
    let text = '';
    stream.on('text', (delta) => {
      text += delta;
    });
    const message = await stream.finalMessage();
    expect(message.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    const thinking = message.content[0] as Anthropic.ThinkingBlock;
    expect(thinking.thinking).toBe('The user asks: why is the sky blue. I will answer plainly.');
    expect(thinking.signature).toMatch(/^sig_/);
    expect(text).toBe('You asked: why is the sky blue');
    expect(message.usage.output_tokens).toBeGreaterThan(0);
  });

  it("hands the client's tool use back, streamed and plain, and answers from its tool_result", async () => {
    const ask: Anthropic.MessageParam = { role: 'user', content: 'client: get_weather {"city":"Oslo"}' };
    const streamed = await client.messages
      .stream({ model: 'scripted:demo', max_tokens: 256, tools, messages: [ask] })
      .finalMessage();
    expect(streamed.stop_reason).toBe('tool_use');
    const use = streamed.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use.name).toBe('get_weather');
    expect(use.input).toEqual({ city: 'Oslo' });
    const plain = await client.messages.create({
      model: 'scripted:demo',
      max_tokens: 256,
      tools,
      messages: [ask],
    });
    expect(plain.content.find((b) => b.type === 'tool_use')).toMatchObject({
      name: 'get_weather',
      input: { city: 'Oslo' },
    });
    const answer = await client.messages.create({
      model: 'scripted:demo',
      max_tokens: 256,
      tools,
      messages: [
        ask,
        { role: 'assistant', content: streamed.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'rain, 12 °C' }] },
      ],
    });
    expect(answer.content[0]).toMatchObject({ type: 'text', text: 'The tool returned rain, 12 °C' });
  });

  it('passes an image on with the user message (has_images on turn.started)', async () => {
    const pixel =
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';
    const message = await client.messages.create({
      model: 'scripted:demo',
      max_tokens: 64,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: pixel } },
            { type: 'text', text: 'what is this' },
          ],
        },
      ],
    });
    expect(message.content[0]).toMatchObject({ text: 'You said: what is this' });
    const started = (await rig.storedOf('turn.started')).at(-1)!;
    expect(started.payload.has_images).toBe(true);
  });

  it('refuses an unknown model with the SDK not-found error', async () => {
    const error = await client.messages
      .create({ model: 'nosuch:model', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .catch((e) => e);
    expect(error.status, error.message).toBe(404);
    expect(error).toBeInstanceOf(Anthropic.NotFoundError);
    expect(error.message).toContain('nosuch:model');
  });
});
