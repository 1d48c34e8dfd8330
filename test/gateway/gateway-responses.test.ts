import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

let rig: GatewayRig;
let client: OpenAI;

const tools: OpenAI.Responses.FunctionTool[] = [
  {
    type: 'function',
    name: 'search_docs',
    description: 'Searches the docs',
    parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
    strict: false,
  },
];

describe('gateway: OpenAI Responses API with the real openai SDK', () => {
  beforeAll(async () => {
    rig = await startGatewayRig();
    const key = rig.issue();
    client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => rig.close());

  it('answers a plain request (output_text) with instructions as the system prompt', async () => {
    const response = await client.responses.create({
      model: 'scripted:demo',
      instructions: 'be brief',
      input: 'hello responses',
    });
    expect(response.status).toBe('completed');
    expect(response.output_text).toBe('You said: hello responses');
    expect(response.usage!.output_tokens).toBeGreaterThan(0);
  });

  it('streams events the SDK stream helper assembles into the final response', async () => {
    const stream = client.responses.stream({ model: 'scripted:demo', input: 'stream it' });
    let deltas = '';
    stream.on('response.output_text.delta', (event) => {
      deltas += event.delta;
    });
    const final = await stream.finalResponse();
    expect(deltas).toBe('You said: stream it');
    expect(final.output_text).toBe('You said: stream it');
  });

  it('returns a function_call, and answers from the function_call_output', async () => {
    const input: OpenAI.Responses.ResponseInput = [
      { role: 'user', content: 'client: search_docs {"q":"quotas"}' },
    ];
    const streamed = await client.responses.stream({ model: 'scripted:demo', input, tools }).finalResponse();
    const call = streamed.output.find(
      (item) => item.type === 'function_call',
    ) as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.name).toBe('search_docs');
    expect(JSON.parse(call.arguments)).toEqual({ q: 'quotas' });
    const plain = await client.responses.create({ model: 'scripted:demo', input, tools });
    expect(plain.output.find((item) => item.type === 'function_call')).toMatchObject({ name: 'search_docs' });
    const answer = await client.responses.create({
      model: 'scripted:demo',
      tools,
      input: [
        ...input,
        call,
        { type: 'function_call_output', call_id: call.call_id, output: 'see docs/gateway.md' },
      ],
    });
    expect(answer.output_text).toBe('The tool returned see docs/gateway.md');
  });

  it('refuses previous_response_id: metis stores no responses', async () => {
    const error = await client.responses
      .create({ model: 'scripted:demo', input: 'x', previous_response_id: 'resp_1' })
      .catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error.message).toContain('previous_response_id');
  });
});
