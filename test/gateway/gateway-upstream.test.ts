import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';
import { startUpstream, type Upstream } from './replay-upstream.js';

let upstream: Upstream;
let rig: GatewayRig;
let key: { id: string; secret: string };

const readFile: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'read_file',
    description: "Reads a file of the client's",
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
};

describe('gateway: a fake upstream provider replaying recorded SSE, reached across shapes', () => {
  beforeAll(async () => {
    // The recorded answers, in the order the requests below reach the fake provider.
    upstream = await startUpstream([
      'anthropic-text.sse',
      'openai-tool-call.sse',
      'openai-text.sse',
      'anthropic-tool-use.sse',
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
    key = rig.issue();
  });
  afterAll(async () => {
    await rig.close();
    await upstream.close();
  });

  it('an OpenAI chat stream served by Anthropic', async () => {
    const client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'anthropic:claude-test',
      messages: [{ role: 'user', content: 'say hello' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('Hello from Claude.');
    expect(upstream.requests[0]!.path).toBe('/v1/messages');
    expect(upstream.requests[0]!.body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'say hello' }] },
    ]);
    const completed = (await rig.storedOf('llm.call_completed')).at(-1)!;
    expect(completed.payload).toMatchObject({
      provider: 'anthropic',
      gateway_key_id: key.id,
      inbound_shape: 'openai',
    });
  });

  it("an Anthropic tool use served by OpenAI: the client's tool alone is offered, and its call comes back", async () => {
    const client = new Anthropic({ apiKey: key.secret, baseURL: rig.url, maxRetries: 0 });
    const message = await client.messages
      .stream({
        model: 'openai:gpt-test',
        max_tokens: 512,
        tools: [
          {
            name: 'read_file',
            description: "Reads a file of the client's",
            input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
          },
        ],
        messages: [{ role: 'user', content: 'read my notes' }],
      })
      .finalMessage();
    expect(message.stop_reason).toBe('tool_use');
    expect(message.content.find((b) => b.type === 'tool_use')).toMatchObject({
      name: 'read_file',
      input: { path: 'notes.txt' },
    });
    const sent = upstream.requests[1]!.body;
    expect(sent.tools.map((t: any) => t.function.name)).toEqual(['read_file']);
    // metis ran no tool of its own for it.
    expect(await rig.storedOf('tool.called')).toEqual([]);
  });

  it('a plain Responses answer served by OpenAI chat completions upstream', async () => {
    const client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    const response = await client.responses.create({ model: 'openai:gpt-test', input: 'hi' });
    expect(response.output_text).toBe('Hello from GPT.');
    expect(upstream.requests[2]!.path).toBe('/v1/chat/completions');
  });

  it('an OpenAI tool call round trip served by Anthropic, with the tool result sent upstream', async () => {
    const client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    const first = await client.chat.completions.create({
      model: 'anthropic:claude-test',
      tools: [readFile],
      messages: [{ role: 'user', content: 'read my notes' }],
    });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('read_file');
    expect(JSON.parse(call.function.arguments)).toEqual({ path: 'notes.txt' });
    expect(first.choices[0]!.message.content).toBe('Let me read the file.');
    const stored = (await rig.storedOf('llm.call_completed')).filter(
      (e) => e.payload.gateway_key_id === key.id,
    );
    expect(stored).toHaveLength(4);
  });

  it("passes a client's image on to the provider in the provider's own form", async () => {
    const pixel =
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';
    const openai = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
    await openai.chat.completions.create({
      model: 'anthropic:claude-test',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${pixel}` } },
          ],
        },
      ],
    });
    expect(upstream.requests[4]!.body.messages[0].content).toEqual([
      { type: 'text', text: 'what is this' },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: pixel } },
    ]);
    const anthropic = new Anthropic({ apiKey: key.secret, baseURL: rig.url, maxRetries: 0 });
    await anthropic.messages.create({
      model: 'openai:gpt-test',
      max_tokens: 64,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } },
            { type: 'text', text: 'and this' },
          ],
        },
      ],
    });
    expect(upstream.requests[5]!.body.messages.at(-1).content).toEqual([
      { type: 'text', text: 'and this' },
      { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
    ]);
  });
});
