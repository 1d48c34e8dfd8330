import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ofType, shapeOf, strictlyIncreasing, subscribe, sync, waitForEvents } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type ReplayServer, sseEvents, startReplayServer } from '../helpers/sse-server.js';

/**
 * Issue "Real model providers", done when: with a base URL pointing at the local replay server,
 * `metis serve --model anthropic:…` and `--model openai:…` stream turns that are indistinguishable on
 * the wire from the scripted model's. Each test runs a real server on port 0 whose default model is
 * the provider's (what `--model` sets), a real WebSocket client on `preset:full`, and the same kind of
 * turn against a scripted-model server as the reference.
 */

const KEY = 'dummy-key-not-a-real-one';

interface Provider {
  readonly name: 'anthropic' | 'openai';
  readonly model: string;
  /** The provider's base URL for a replay server at `url`. */
  readonly baseUrl: (url: string) => string;
  readonly text: string;
  readonly toolUse: string;
  readonly toolAnswer: string;
  /** Whether the tool-use recording streams text before its tool use, as the scripted model does. */
  readonly toolPreface: boolean;
  /** The header the provider names its request by (on every answer, as the real APIs send it). */
  readonly requestIdHeader: string;
}

const PROVIDERS: readonly Provider[] = [
  {
    name: 'anthropic',
    model: 'anthropic:claude-test',
    baseUrl: (url) => url,
    text: 'anthropic-text.sse',
    toolUse: 'anthropic-tool-use.sse',
    toolAnswer: 'anthropic-tool-answer.sse',
    toolPreface: true,
    requestIdHeader: 'request-id',
  },
  {
    name: 'openai',
    model: 'openai:gpt-test',
    baseUrl: (url) => `${url}/v1`,
    text: 'openai-text.sse',
    toolUse: 'openai-tool-call.sse',
    toolAnswer: 'openai-tool-answer.sse',
    toolPreface: false,
    requestIdHeader: 'x-request-id',
  },
];

/** The text a recording streams, read from its SSE data lines (Anthropic text_delta, OpenAI delta.content). */
function recordedText(fixture: string): string {
  let text = '';
  for (const event of sseEvents(fixture)) {
    const data = /^data: (.*)$/m.exec(event)?.[1];
    if (data === undefined || data === '[DONE]') continue;
    const chunk = JSON.parse(data);
    if (chunk.type === 'content_block_delta' && chunk.delta?.type === 'text_delta') text += chunk.delta.text;
    const content = chunk.choices?.[0]?.delta?.content;
    if (typeof content === 'string') text += content;
  }
  return text;
}

/** A server whose default model is the provider's, its base URL at the replay server. */
async function providerServer(p: Provider, replay: ReplayServer): Promise<TestServer> {
  return startTestServer({
    default_model: p.model,
    providers: { [p.name]: { base_url: p.baseUrl(replay.url), api_key: KEY } },
    pricing: {
      [`${p.name}:*`]: {
        input_per_mtok: 1,
        output_per_mtok: 2,
        cached_input_per_mtok: 0,
        cache_creation_per_mtok: 0,
      },
    },
  });
}

interface WireTurn {
  readonly sessionId: string;
  readonly turnId: string;
  /** Every event the client received after its subscribe ack, in order. */
  readonly events: any[];
}

/** Creates a session, subscribes a real WebSocket client on preset:full, submits one turn, and collects its wire. */
async function wireTurn(t: TestServer, message: string): Promise<WireTurn> {
  const sessionId = await t.createSession();
  writeFileSync(join(t.workspace, 'notes.txt'), 'hello from the notes\n');
  const { client } = await subscribe(t, sessionId, { filter: 'preset:full' });
  const from = client.events().length;
  const turnId = await t.submit(sessionId, message);
  await waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
  expect(await sync(client)).toBe(true);
  return { sessionId, turnId, events: client.events().slice(from) };
}

/** A value's kind; an object's kind lists its keys (so `usage` fields are compared too). */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'object') return `{${Object.keys(value).sort().join(',')}}`;
  return typeof value;
}

/**
 * What a client can see of an event besides its values: envelope fields and their kinds, actor,
 * sensitivity, whether it is persisted (seq), the type of its parent event, and its payload's keys with
 * the kind of each value. Two turns are indistinguishable on the wire when these agree event for event.
 */
function profile(events: readonly any[]): string[] {
  const byId = new Map(events.map((e) => [e.id, e]));
  return events.map((e) => {
    const envelope = Object.keys(e)
      .sort()
      .map((k) => `${k}:${kindOf(e[k])}`)
      .join(',');
    const payload = Object.keys(e.payload)
      .sort()
      .map((k) => `${k}:${kindOf(e.payload[k])}`)
      .join(',');
    const parent = e.parent_event_id === null ? 'none' : (byId.get(e.parent_event_id)?.type ?? 'outside');
    return `${e.type} actor=${e.actor} sensitivity=${e.sensitivity} parent=${parent} envelope={${envelope}} payload={${payload}}`;
  });
}

/** One entry per event, runs of the same delta type collapsed to one (token counts differ). */
function collapsedProfile(events: readonly any[]): string[] {
  const out: string[] = [];
  const profiles = profile(events);
  for (let i = 0; i < events.length; i += 1) {
    const isDelta = events[i].type.endsWith('.delta') || events[i].type === 'tool.use_input_delta';
    if (isDelta && i > 0 && events[i - 1].type === events[i].type && out[out.length - 1] === profiles[i]) {
      continue;
    }
    out.push(profiles[i]!);
  }
  return out;
}

function textOf(events: readonly any[], messageId: string): string {
  return ofType(events, 'text.delta')
    .filter((e) => e.payload.message_id === messageId)
    .map((e) => e.payload.text)
    .join('');
}

/** Canonical order within each model call (streaming spec §5): call start, message, call end; ids increase. */
function expectCanonicalOrder(events: readonly any[]): void {
  expect(strictlyIncreasing(events)).toBe(true);
  const types = events.map((e) => e.type);
  const starts = ofType(events, 'llm.call_started');
  expect(starts.length).toBeGreaterThan(0);
  for (const [n, start] of starts.entries()) {
    const message = ofType(events, 'message.start')[n];
    const complete = ofType(events, 'message.complete')[n];
    const done = ofType(events, 'llm.call_completed')[n];
    expect(message && complete && done).toBeTruthy();
    const at = (e: any) => events.indexOf(e);
    expect(at(start)).toBeLessThan(at(message));
    expect(at(message)).toBeLessThan(at(complete));
    expect(at(complete)).toBeLessThan(at(done));
    // Every delta of the message lies between its start and its complete.
    const messageId = message.payload.message_id;
    for (const e of events) {
      if (e.payload?.message_id !== messageId || e.type === 'message.start' || e.type === 'message.complete')
        continue;
      expect(at(e)).toBeGreaterThan(at(message));
      expect(at(e)).toBeLessThan(at(complete));
    }
  }
  expect(types[0]).toBe('turn.started');
  expect(types[types.length - 1]).toBe('turn.completed');
}

async function persistedMessages(t: TestServer, sessionId: string): Promise<any[]> {
  const response = await t.request('GET', `/sessions/${sessionId}/messages`);
  expect(response.status).toBe(200);
  return response.body.messages;
}

describe.each(PROVIDERS)('real $name provider through the server against a replay server', (p) => {
  it(`plain text: the wire of a ${p.name} turn matches a scripted turn's`, async () => {
    const reference = await startTestServer();
    const scripted = await wireTurn(reference, 'hello there');

    const replay = await startReplayServer([
      { fixture: p.text, headers: { [p.requestIdHeader]: 'req_replay_1' } },
    ]);
    const t = await providerServer(p, replay);
    const real = await wireTurn(t, 'Say hello');
    expect(replay.requests).toHaveLength(1);

    // (a) the same event types in the same order, delta runs collapsed
    expect(shapeOf(real.events)).toEqual(shapeOf(scripted.events));
    expect(shapeOf(real.events)).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    // …and the same envelopes, parents and payload fields event for event
    expect(collapsedProfile(real.events)).toEqual(collapsedProfile(scripted.events));

    // (b) canonical order
    expectCanonicalOrder(real.events);
    expectCanonicalOrder(scripted.events);

    // (c) deltas = final_content = the recording
    const [complete] = ofType(real.events, 'message.complete');
    const text = textOf(real.events, complete.payload.message_id);
    expect(complete.payload.final_content).toEqual([{ type: 'text', text }]);
    expect(text).toBe(recordedText(p.text));
    expect(text.length).toBeGreaterThan(0);

    // (d) the provider model and non-zero usage
    const [started] = ofType(real.events, 'llm.call_started');
    expect(started.payload).toMatchObject({ model: p.model, provider: p.name });
    const [completed] = ofType(real.events, 'llm.call_completed');
    expect(completed.payload).toMatchObject({ model: p.model, provider: p.name, stop_reason: 'end_turn' });
    expect(completed.payload.input_tokens).toBeGreaterThan(0);
    expect(completed.payload.output_tokens).toBeGreaterThan(0);
    expect(completed.payload.cost_usd).toBeGreaterThan(0);
    expect(ofType(real.events, 'route.decided')[0].payload.chosen_model).toBe(p.model);

    // (e) the persisted assistant message
    const messages = await persistedMessages(t, real.sessionId);
    expect(messages.map((m) => [m.role, m.status])).toEqual([
      ['user', 'complete'],
      ['assistant', 'complete'],
    ]);
    expect(messages[1]).toMatchObject({
      model: p.model,
      content: [{ type: 'text', text: recordedText(p.text) }],
    });
  });

  it(`tool use ending in a second call: the wire of a ${p.name} turn matches a scripted turn's`, async () => {
    const reference = await startTestServer();
    const scripted = await wireTurn(reference, 'read: notes.txt');

    const replay = await startReplayServer([
      { fixture: p.toolUse, headers: { [p.requestIdHeader]: 'req_replay_1' } },
      { fixture: p.toolAnswer, headers: { [p.requestIdHeader]: 'req_replay_2' } },
    ]);
    const t = await providerServer(p, replay);
    const real = await wireTurn(t, 'What do my notes say?');
    expect(replay.requests).toHaveLength(2);

    // The scripted model always streams a preface ("Reading it.") before its tool use; the OpenAI
    // recording has none (content: null). That is the recording's content, not the wire format, so the
    // reference drops its first message's text deltas for such a recording.
    const [firstMessage] = ofType(scripted.events, 'message.start');
    const comparable = p.toolPreface
      ? scripted.events
      : scripted.events.filter(
          (e) => !(e.type === 'text.delta' && e.payload.message_id === firstMessage.payload.message_id),
        );
    expect(shapeOf(real.events)).toEqual(shapeOf(comparable));
    expect(shapeOf(real.events)).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      ...(p.toolPreface ? ['text.delta*'] : []),
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
    expect(collapsedProfile(real.events)).toEqual(collapsedProfile(comparable));

    expectCanonicalOrder(real.events);
    expectCanonicalOrder(scripted.events);

    // The tool ran on the real input and its result went back to the provider.
    const [useEnd] = ofType(real.events, 'tool.use_end');
    expect(useEnd.payload.final_input).toEqual({ path: 'notes.txt' });
    const [toolCompleted] = ofType(real.events, 'tool.completed');
    expect(toolCompleted.payload).toMatchObject({ success: true, output_size_bytes: 21 });
    expect(JSON.stringify(replay.requests[1]!.body.messages)).toContain('hello from the notes');

    const completes = ofType(real.events, 'message.complete');
    expect(completes.map((c) => c.payload.stop_reason)).toEqual(['tool_use', 'end_turn']);
    const answer = completes[1];
    const text = textOf(real.events, answer.payload.message_id);
    expect(answer.payload.final_content).toEqual([{ type: 'text', text }]);
    expect(text).toBe(recordedText(p.toolAnswer));

    const calls = ofType(real.events, 'llm.call_completed');
    for (const call of calls) {
      expect(call.payload).toMatchObject({ model: p.model, provider: p.name });
      expect(call.payload.input_tokens).toBeGreaterThan(0);
      expect(call.payload.output_tokens).toBeGreaterThan(0);
    }
    expect(calls.map((c) => c.payload.stop_reason)).toEqual(['tool_use', 'end_turn']);
    expect(ofType(real.events, 'turn.completed')[0].payload).toMatchObject({
      llm_call_count: 2,
      tool_call_count: 1,
    });

    const messages = await persistedMessages(t, real.sessionId);
    expect(messages.map((m) => [m.role, m.status])).toEqual([
      ['user', 'complete'],
      ['assistant', 'complete'],
      ['tool', 'complete'],
      ['assistant', 'complete'],
    ]);
    expect(messages[3]).toMatchObject({ model: p.model, content: [{ type: 'text', text }] });
  });
});
