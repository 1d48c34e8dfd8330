import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

// One server for the file.
let rig: GatewayRig;
let key: { id: string; secret: string };
let client: OpenAI;

describe('gateway: OpenAI chat completions with the real openai SDK', () => {
  beforeAll(async () => {
    rig = await startGatewayRig();
    key = rig.issue({ userId: 'usr_alice', teamId: 'team_ml' });
    client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => rig.close());

  it('answers a plain request through the scripted model, recorded as a session with the key on llm.call_completed', async () => {
    const completion = await client.chat.completions.create({
      model: 'scripted:demo',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello there' },
      ],
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('scripted:demo');
    expect(completion.choices[0]!.message.content).toBe('You said: hello there');
    expect(completion.choices[0]!.finish_reason).toBe('stop');
    expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
    const completed = (await rig.storedOf('llm.call_completed')).at(-1)!;
    expect(completed.payload).toMatchObject({
      gateway_key_id: key.id,
      inbound_shape: 'openai',
      user_id: 'usr_alice',
      team_id: 'team_ml',
      model: 'scripted:demo',
    });
    const session = (await rig.stored())
      .filter((e) => e.session_id === completed.session_id)
      .map((e) => e.type);
    // The session keeps what the request added and the answer.
    const stored = rig.runtime.sessions.messages(completed.session_id, { limit: 10 });
    expect(stored.map((m) => [m.role, m.content])).toEqual([
      ['user', [{ type: 'text', text: 'hello there' }]],
      ['assistant', [{ type: 'text', text: 'You said: hello there' }]],
    ]);
    // The evaluator and the pattern recorder follow, as for any session.
    expect(session.slice(0, 7)).toEqual([
      'session.created',
      'turn.started',
      'route.decided',
      'llm.call_started',
      'llm.call_completed',
      'turn.completed',
      'session.ended',
    ]);
  });

  it('streams the answer as chat.completion.chunks the SDK reassembles', async () => {
    const stream = await client.chat.completions.create({
      model: 'scripted:demo',
      messages: [{ role: 'user', content: 'stream this please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('You said: stream this please');
    expect(finish).toBe('stop');
    expect(usage?.total_tokens).toBeGreaterThan(0);
  });

  it("returns the client's tool call to the client, and answers from the tool result it sends back", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'lookup_order',
          description: 'Looks an order up',
          parameters: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
        },
      },
    ];
    const ask: OpenAI.ChatCompletionMessageParam = {
      role: 'user',
      content: 'client: lookup_order {"id":"A7"}',
    };
    const first = await client.chat.completions.create({ model: 'scripted:demo', messages: [ask], tools });
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('lookup_order');
    expect(JSON.parse(call.function.arguments)).toEqual({ id: 'A7' });
    // Streamed, the same call arrives as tool_call deltas.
    const runner = client.chat.completions.stream({ model: 'scripted:demo', messages: [ask], tools });
    const streamed = await runner.finalChatCompletion();
    const streamedCall = streamed.choices[0]!.message
      .tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(streamedCall.function.name).toBe('lookup_order');
    expect(JSON.parse(streamedCall.function.arguments)).toEqual({ id: 'A7' });
    const second = await client.chat.completions.create({
      model: 'scripted:demo',
      tools,
      messages: [ask, choice.message, { role: 'tool', tool_call_id: call.id, content: 'shipped on Monday' }],
    });
    expect(second.choices[0]!.message.content).toBe('The tool returned shipped on Monday');
    // Its session stores the tool result it added, not the history resent with it.
    const session = (await rig.storedOf('llm.call_completed')).at(-1)!.session_id;
    expect(rig.runtime.sessions.messages(session, { limit: 10 }).map((m) => m.role)).toEqual([
      'tool',
      'assistant',
    ]);
    // metis ran nothing: no tool.called in any session.
    expect(await rig.storedOf('tool.called')).toEqual([]);
  });

  it('lists models for the key', async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model.id);
    expect(models).toContain('scripted:demo');
  });

  it('answers a bad request with a 400 naming the field', async () => {
    const error = await client.chat.completions
      .create({ model: 'scripted:demo', messages: [{ role: 'wizard', content: 'x' } as never] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('messages[0].role');
  });
});
