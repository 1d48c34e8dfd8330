import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ConversationState, type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { projectState } from '../../src/client/state-projection.js';
import { TRACES_DIR, traceFrames } from '../helpers/traces.js';

function expected(name: string): unknown {
  return JSON.parse(readFileSync(join(TRACES_DIR, `${name}.expected.json`), 'utf8'));
}

function run(frames: readonly Frame[], from: ConversationState = initialState): ConversationState {
  return frames.reduce(reduce, from);
}

/** The projection as it would be written to JSON (no undefined, no holes). */
function project(state: ConversationState): unknown {
  return JSON.parse(JSON.stringify(projectState(state)));
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

const isEvent = (type: string) => (f: Frame) => f.type === 'event' && f.event.type === type;

const TRACES = readdirSync(TRACES_DIR)
  .filter((f) => f.endsWith('.jsonl'))
  .map((f) => f.slice(0, -'.jsonl'.length))
  .sort();

describe('reducer: recorded streaming-conformance traces', () => {
  it('has the traces the issue asks for', () => {
    expect(TRACES).toEqual(
      expect.arrayContaining([
        'plain-turn',
        'thinking',
        'tool-use',
        'reconnect-mid-message',
        'cancel-mid-llm',
        'cancel-mid-tool',
        'worker-session',
        'final-content-mismatch',
      ]),
    );
  });

  it.each(TRACES)('%s: the final state projects to the expected file', (name) => {
    expect(project(run(traceFrames(name)))).toStrictEqual(expected(name));
  });

  it.each(TRACES)('%s: reduce is pure (never mutates the state it is given)', (name) => {
    let state = deepFreeze(initialState);
    for (const frame of traceFrames(name)) state = deepFreeze(reduce(state, deepFreeze(frame)));
    expect(project(state)).toStrictEqual(expected(name));
  });

  it('marks what a cancel left: the partial message, the cancelled tool, the cancelled turns', () => {
    const llm = projectState(run(traceFrames('cancel-mid-llm')));
    expect(llm.messages).toMatchObject([{ status: 'cancelled', blocks: [{ type: 'text' }] }]);
    expect((llm.messages[0]!.blocks[0] as { text: string }).text).toMatch(/^Slowly about the history of/);
    expect(llm.turns).toMatchObject([{ status: 'cancelled', cancel_reason: 'user_cancel' }]);
    const tool = projectState(run(traceFrames('cancel-mid-tool')));
    expect(tool.tools).toMatchObject([
      { tool_name: 'shell', status: 'cancelled', error_class: 'cancelled', input: { command: 'sleep 5' } },
    ]);
    expect(tool.messages).toMatchObject([{ status: 'complete' }]);
    expect(tool.turns).toMatchObject([{ status: 'cancelled' }]);
  });

  it('a worker session: its messages and turn are kept apart from the planner, linked by the tool', () => {
    const state = projectState(run(traceFrames('worker-session')));
    const [tool] = state.tools;
    expect(tool).toMatchObject({ tool_name: 'delegate', status: 'completed' });
    const worker = tool!.worker_session_id!;
    expect(worker).toMatch(/^sess_/);
    expect(state.messages.map((m) => m.session_id === worker)).toEqual([false, true, false]);
    expect(state.turns.map((t) => [t.session_id === worker, t.status])).toEqual([
      [false, 'completed'],
      [true, 'completed'],
    ]);
  });

  it('a reconnect mid-message rebuilds the same message as the server stored, with no delta twice', () => {
    const frames = traceFrames('reconnect-mid-message');
    const acks = frames.filter((f) => f.type === 'subscribe_ack');
    expect(acks).toHaveLength(2);
    expect(acks[1]!.since).not.toBeNull();
    const state = run(frames);
    expect(state.mismatches).toBe(0);
    const complete = frames.find(isEvent('message.complete'))!.event.payload;
    expect(state.messages).toHaveLength(1);
    expect(state.messages[0]!.blocks).toEqual(complete.final_content);
  });
});

describe('reducer: focused behaviour', () => {
  it('ignores duplicate event ids: every event twice, or a whole replay again, changes nothing', () => {
    const frames = traceFrames('tool-use');
    const plain = project(run(frames));
    const doubled = frames.flatMap((f) => (f.type === 'event' ? [f, structuredClone(f)] : [f]));
    expect(project(run(doubled))).toStrictEqual(plain);
    const replayedAgain = [...frames, ...frames.filter((f) => f.type === 'event')];
    expect(project(run(replayedAgain))).toStrictEqual(plain);
    // The state object itself is returned for a duplicate: nothing to re-render.
    const state = run(frames);
    const last = frames.filter((f) => f.type === 'event').at(-1)!;
    expect(reduce(state, last)).toBe(state);
  });

  it('skips unknown event types without throwing, counts them, and moves the cursor past them (§9.2, §11.1.14)', () => {
    const frames = traceFrames('plain-turn');
    const at = frames.findIndex(isEvent('message.start'));
    const before = frames[at]!.event;
    // Ids sort between their neighbours: a longer id with the same prefix sorts right after it.
    const unknown = (suffix: string, type: string, payload: unknown): Frame => ({
      type: 'event',
      event: { ...before, id: `${before.id}${suffix}`, type, payload },
    });
    const injected = [
      ...frames.slice(0, at + 1),
      unknown('0', 'made.up.thing', { anything: [1, { deep: true }] }),
      // A newer server's type in a domain this client knows is just as unknown.
      unknown('1', 'turn.paused', null),
      { type: 'made_up_frame', whatever: 1 },
      ...frames.slice(at + 1),
    ];
    let state = initialState;
    expect(() => {
      state = run(injected);
    }).not.toThrow();
    expect(state.unknownSkipped).toBe(2);
    expect(project(state)).toStrictEqual({ ...(expected('plain-turn') as object), unknown_skipped: 2 });
    const afterUnknown = run(injected.slice(0, at + 3));
    expect(afterUnknown.lastEventId).toBe(`${before.id}1`);
    // A frame type the reducer does not know leaves the state as it is.
    expect(reduce(afterUnknown, { type: 'made_up_frame' })).toBe(afterUnknown);
  });

  it('replaces the streamed tool input by final_input at tool.use_end', () => {
    const frames = traceFrames('tool-use');
    const end = frames.findIndex(isEvent('tool.use_end'));
    const { tool_use_id, message_id, content_block_index, final_input } = frames[end]!.event.payload;
    const fragments = frames
      .filter((f) => isEvent('tool.use_input_delta')(f) && f.event.payload.tool_use_id === tool_use_id)
      .map((f) => f.event.payload.partial_json)
      .join('');
    const blockOf = (state: ConversationState) =>
      state.messages.find((m) => m.id === message_id)!.blocks[content_block_index];

    const streaming = run(frames.slice(0, end));
    expect(blockOf(streaming)).toMatchObject({ type: 'tool_use', partial_json: fragments, input: null });
    expect(streaming.tools[tool_use_id]!.input).toBeNull();
    const ended = reduce(streaming, frames[end]!);
    expect(blockOf(ended)).toMatchObject({ type: 'tool_use', input: final_input });
    expect(ended.tools[tool_use_id]!.input).toEqual(final_input);

    // Fragments that are not even JSON do not matter: final_input is authoritative.
    const garbled = traceFrames('tool-use');
    for (const f of garbled) if (isEvent('tool.use_input_delta')(f)) f.event.payload.partial_json = '{"x":';
    const afterGarbled = run(garbled.slice(0, end + 1));
    expect(blockOf(afterGarbled)).toMatchObject({ input: final_input });
  });

  it('applies a snapshot, then only events after snapshot_at_event_id', () => {
    const frames = traceFrames('snapshot-then-turn');
    const at = frames.findIndex((f) => f.type === 'snapshot');
    const snapshot = frames[at]!;
    const afterSnapshot = run(frames.slice(0, at + 1));
    expect(afterSnapshot.lastEventId).toBe(snapshot.snapshot_at_event_id);
    expect(afterSnapshot.session).toEqual(snapshot.session);
    expect(projectState(afterSnapshot).messages).toEqual(
      snapshot.messages.map((m: any) => ({
        id: m.id,
        session_id: m.session_id,
        turn_id: m.turn_id,
        role: m.role,
        status: m.status,
        blocks: m.content,
      })),
    );
    expect(afterSnapshot.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    // An event the snapshot already covers (id <= snapshot_at_event_id) is not applied again.
    const covered: Frame = {
      type: 'event',
      event: {
        id: snapshot.snapshot_at_event_id,
        type: 'message.start',
        session_id: snapshot.session.id,
        turn_id: null,
        payload: { message_id: 'msg_covered', role: 'assistant', model: 'scripted:demo' },
      },
    };
    expect(reduce(afterSnapshot, covered)).toBe(afterSnapshot);
    // The live turn's messages follow the snapshot's.
    const final = projectState(run(frames));
    expect(final.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'assistant', 'assistant']);
    expect(final.messages.slice(0, 2)).toEqual(projectState(afterSnapshot).messages);
  });

  it('a snapshot with pending_confirmations loads them as pending; a later resolved event settles them', () => {
    const frames = traceFrames('snapshot-then-turn');
    const at = frames.findIndex((f) => f.type === 'snapshot');
    const snapshot = frames[at]!;
    // Without the additive field (every recorded trace), the confirmations and the projection are as before.
    expect(snapshot).not.toHaveProperty('pending_confirmations');
    const plain = run(frames.slice(0, at + 1));
    expect(plain.confirmations).toEqual({});

    const pending = {
      confirmation_request_id: 'conf_1',
      tool_use_id: 'tu_1',
      tool_name: 'shell',
      side_effects: 'execute',
      summary: 'echo hi',
      turn_id: 'turn_1',
      requested_event_id: snapshot.snapshot_at_event_id,
      requested_at: '2026-01-01T00:00:00.000000Z',
      expires_at: null,
    };
    const withPending = deepFreeze({ ...snapshot, pending_confirmations: [pending] });
    const loaded = reduce(initialState, withPending);
    expect(loaded.confirmations).toEqual({
      conf_1: {
        confirmation_request_id: 'conf_1',
        // An older server's entry has no session_id: it is the attached session's own.
        session_id: snapshot.session.id,
        tool_use_id: 'tu_1',
        tool_name: 'shell',
        summary: 'echo hi',
        status: 'pending',
      },
    });
    // Everything else is what the snapshot without the field gives.
    expect({ ...projectState(loaded), confirmations: [] }).toEqual(projectState(plain));
    expect(projectState(loaded).confirmations).toEqual([
      { confirmation_request_id: 'conf_1', tool_use_id: 'tu_1', tool_name: 'shell', status: 'pending' },
    ]);

    const resolved: Frame = {
      type: 'event',
      event: {
        id: `${snapshot.snapshot_at_event_id}Z`,
        type: 'tool.confirmation_resolved',
        session_id: snapshot.session.id,
        turn_id: 'turn_1',
        payload: { tool_use_id: 'tu_1', confirmation_request_id: 'conf_1', decision: 'allow', scope: 'once' },
      },
    };
    expect(reduce(loaded, resolved).confirmations.conf_1!.status).toBe('allow');
    // A later snapshot without the field keeps what the client knew (as it keeps tools and turns).
    expect(reduce(reduce(loaded, resolved), snapshot).confirmations.conf_1!.status).toBe('allow');
  });

  it('attached mid-message: the message starts after the snapshot, and the client builds it whole', () => {
    const frames = traceFrames('attach-mid-message');
    const at = frames.findIndex((f) => f.type === 'snapshot');
    expect(frames[at]!.in_flight_events).toEqual([]);
    const start = frames.findIndex(isEvent('message.start'));
    expect(start).toBeGreaterThan(at);
    const final = run(frames);
    expect(final.mismatches).toBe(0);
    expect(final.messages.find((m) => m.id === frames[start]!.event.payload.message_id)!.status).toBe(
      'complete',
    );
  });

  it("a snapshot whose in_flight_events carry a message's events so far (when the replay is too large); the deltas continue it", () => {
    // The attach-mid-message trace as a server sends it when the replay after the point would be too
    // large: the message's first events ride in the snapshot, and the stream goes on after them.
    const recorded = traceFrames('attach-mid-message');
    const at = recorded.findIndex((f) => f.type === 'snapshot');
    const start = recorded.findIndex(isEvent('message.start'));
    const cut = start + 7; // message.start and six deltas
    const inFlight = recorded.slice(start, cut).map((f) => f.event);
    const snapshot = {
      ...recorded[at]!,
      in_flight_events: inFlight,
      snapshot_at_event_id: inFlight.at(-1).id,
    };
    const frames = [...recorded.slice(0, at), snapshot, ...recorded.slice(cut)];
    expect(inFlight[0].type).toBe('message.start');
    const afterSnapshot = run(frames.slice(0, at + 1));
    const streaming = afterSnapshot.messages.find((m) => m.id === inFlight[0].payload.message_id)!;
    expect(streaming.status).toBe('streaming');
    expect(streaming.blocks).toEqual([
      {
        type: 'text',
        text: inFlight
          .filter((e) => e.type === 'text.delta')
          .map((e) => e.payload.text)
          .join(''),
      },
    ]);
    const final = run(frames);
    expect(final.mismatches).toBe(0);
    expect(final.messages.find((m) => m.id === streaming.id)!.status).toBe('complete');
  });

  it('message.complete for a message that started before the client attached creates it from final_content', () => {
    const frames = traceFrames('live-attach-mid-message');
    const complete = frames.findIndex(isEvent('message.complete'));
    const { message_id, final_content } = frames[complete]!.event.payload;
    // The deltas before it belong to a message the client never saw start: nothing to attach them to.
    expect(frames.slice(0, complete).some(isEvent('message.start'))).toBe(false);
    expect(frames.slice(0, complete).some(isEvent('text.delta'))).toBe(true);
    const before = run(frames.slice(0, complete));
    expect(before.messages).toEqual([]);
    const after = reduce(before, frames[complete]!);
    expect(after.messages).toMatchObject([
      { id: message_id, role: 'assistant', status: 'complete', blocks: final_content },
    ]);
    expect(after.mismatches).toBe(0);
  });

  it('final_content wins over deltas that do not add up, and the mismatch is counted once', () => {
    const plain = traceFrames('plain-turn');
    const garbled = traceFrames('final-content-mismatch');
    const deltas = (frames: Frame[]) =>
      frames
        .filter(isEvent('text.delta'))
        .map((f) => f.event.payload.text)
        .join('');
    expect(deltas(garbled)).not.toBe(deltas(plain));
    const state = run(garbled);
    expect(state.mismatches).toBe(1);
    expect(state.messages[0]!.blocks).toEqual([{ type: 'text', text: 'You said: hello there' }]);
    expect(project(state)).toStrictEqual({ ...(project(run(plain)) as object), mismatches: 1 });
  });

  it('compares with final_content regardless of key order, and a redacted-thinking placeholder is no mismatch', () => {
    const frames = traceFrames('thinking');
    const complete = frames.find(isEvent('message.complete'))!;
    // Same content, keys in another order (another server, another JSON library).
    complete.event.payload.final_content = complete.event.payload.final_content.map((b: any) =>
      Object.fromEntries(Object.entries(b).reverse()),
    );
    expect(run(frames).mismatches).toBe(0);

    // Redacted thinking streams as one empty thinking.delta; final_content has the block.
    const redacted = traceFrames('thinking');
    const firstThinking = redacted.findIndex(isEvent('thinking.delta'));
    const withoutThinking = redacted.filter((f, i) => i === firstThinking || !isEvent('thinking.delta')(f));
    withoutThinking[firstThinking]!.event.payload.text = '';
    withoutThinking[firstThinking]!.event.payload.signature = null;
    const final = withoutThinking.find(isEvent('message.complete'))!.event.payload;
    final.final_content[0] = { type: 'redacted_thinking', data: 'opaque' };
    const state = run(withoutThinking);
    expect(state.mismatches).toBe(0);
    expect(projectState(state).messages[0]!.blocks[0]).toEqual({ type: 'redacted_thinking', data: 'opaque' });
  });
});
