import { encodeTime } from 'ulid';
import { plural } from '../plural.js';
import { type CheckContext, CheckFailure, expectEqual, expectTrue, sleep, turnShape } from './context.js';

export interface Check {
  readonly name: string;
  /** The streaming spec test (§11.1) or invariant it covers. */
  readonly covers: string;
  /** Needs the `--conformance` hooks of the server. */
  readonly needsHooks?: boolean;
  /**
   * Applies to server-sent events too (`--transport sse`). Checks of what only a WebSocket has (client
   * frames, pings and pongs, subscribing on an open socket) leave it unset.
   */
  readonly sse?: boolean;
  run(ctx: CheckContext): Promise<string | undefined>;
}

const HAPPY_TOOL_TURN = [
  'turn.started',
  'route.decided',
  'llm.call_started',
  'message.start',
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
];

const ids = (events: readonly any[]) => events.map((e) => e.id);

export const streamChecks: Check[] = [
  {
    name: 'happy_path_order',
    sse: true,
    covers: '§11.1 test 1, §5.3',
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session);
      const turn = await ctx.submit(session, 'time');
      await ctx.turnEnd(client, turn);
      expectEqual(
        'a tool-using turn streams in the canonical order of §5.3',
        HAPPY_TOOL_TURN,
        turnShape(client.events(), turn),
      );
      return undefined;
    },
  },
  {
    name: 'snapshot_consistency',
    sse: true,
    covers: '§11.1 test 2, §3.4',
    async run(ctx) {
      const session = await ctx.newSession();
      const control = await ctx.attach(session);
      const first = await ctx.submit(session, 'hello');
      await ctx.turnEnd(control, first);
      const second = await ctx.submit(session, 'slow: the snapshot');
      await ctx.eventOf(control, 'text.delta', (e) => e.turn_id === second);
      const late = await ctx.attach(session, { filter: 'preset:full', snapshot: true });
      const snapshot = await late.waitFor((f) => f.type === 'snapshot', 10_000, 'snapshot');
      await ctx.api('POST', `/sessions/${session}/turns/${second}/cancel`, {});
      await ctx.turnEnd(late, second);
      const texts = (snapshot.messages as any[]).flatMap((m) =>
        (m.content as any[]).filter((b) => b.type === 'text').map((b) => b.text),
      );
      expectTrue("the snapshot holds the first turn's answer", texts.includes('You said: hello'), texts);
      expectEqual('the snapshot names the turn in flight', second, snapshot.session.current_turn_id);
      const early = late.events().filter((e) => e.id <= snapshot.snapshot_at_event_id);
      expectEqual('no event after the snapshot has an id ≤ snapshot_at_event_id', [], ids(early));
      return undefined;
    },
  },
  {
    name: 'reconnect_replay',
    sse: true,
    covers: '§11.1 test 3, §3.6, invariant 6',
    async run(ctx) {
      const session = await ctx.newSession();
      const control = await ctx.attach(session);
      const first = await ctx.attach(session);
      const turn = await ctx.submit(session, 'slow: reconnecting');
      await first.waitFor(
        (f) =>
          f.type === 'event' &&
          f.event.type === 'text.delta' &&
          f.event.payload.content_block_index === 0 &&
          first.events().filter((e) => e.type === 'text.delta').length >= 5,
      );
      first.close();
      const cursor = first.events().at(-1).id;
      await sleep(100);
      const second = await ctx.attach(session, { filter: 'preset:full', since: cursor, snapshot: false });
      await sleep(50);
      await ctx.api('POST', `/sessions/${session}/turns/${turn}/cancel`, {});
      await ctx.turnEnd(control, turn);
      await ctx.turnEnd(second, turn);
      const union = [...first.events().filter((e) => e.id <= cursor), ...second.events()];
      const expected = control.events().filter((e) => e.session_id === session && e.id <= union.at(-1).id);
      const seen = union.filter((e) => e.session_id === session);
      expectEqual(
        "the events before and after the reconnect are the control client's, no duplicate and no gap",
        ids(expected),
        ids(seen),
      );
      return `${plural(second.events().length, 'event')} replayed or streamed after the reconnect`;
    },
  },
  {
    name: 'replay_too_large',
    sse: true,
    covers: '§11.1 test 4',
    needsHooks: true,
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session);
      const turn = await ctx.submit(session, 'hello');
      await ctx.turnEnd(client, turn);
      const cursor = client.events()[0].id;
      const flood = await ctx.api('POST', '/_conformance/flood', {
        session_id: session,
        count: ctx.info!.replay_cap + 5000,
      });
      expectEqual('the flood hook answers 200', 200, flood.status);
      const late = await ctx.attach(session, { filter: 'preset:full', since: cursor, snapshot: false });
      const answer = late.frames.find((f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error');
      expectEqual('a gap over the replay cap is refused', 'replay_too_large', answer?.code ?? answer?.type);
      return undefined;
    },
  },
  {
    name: 'cursor_expired',
    sse: true,
    covers: '§11.1 test 5',
    async run(ctx) {
      const session = await ctx.newSession();
      // An id from ten years ago: older than any retention window.
      const old = `evt_${encodeTime(Date.now() - 3650 * 24 * 3600 * 1000, 10)}0000000000000000`;
      const client = await ctx.attach(session, { filter: 'preset:full', since: old, snapshot: false });
      const answer = client.frames.find((f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error');
      expectEqual('a cursor older than retention is refused', 'cursor_expired', answer?.code ?? answer?.type);
      return undefined;
    },
  },
  {
    name: 'multi_client_identical',
    sse: true,
    covers: '§11.1 test 6, §10.4',
    async run(ctx) {
      const session = await ctx.newSession();
      const a = await ctx.attach(session, { filter: 'preset:chat' });
      const b = await ctx.attach(session, { filter: 'preset:chat' });
      const turn = await ctx.submit(session, 'time');
      await ctx.turnEnd(a, turn);
      await ctx.turnEnd(b, turn);
      expectEqual('two clients with one filter receive the same events', ids(a.events()), ids(b.events()));
      return undefined;
    },
  },
  {
    name: 'workers_hidden_and_included',
    sse: true,
    covers: '§11.1 test 12, §7',
    async run(ctx) {
      const session = await ctx.newSession();
      const hidden = await ctx.attach(session, {
        filter: { event_types: null, actors: null, include_worker_sessions: false },
      });
      const shown = await ctx.attach(session, {
        filter: { event_types: null, actors: null, include_worker_sessions: true },
      });
      const turn = await ctx.submit(session, 'delegate: count to three');
      await ctx.turnEnd(hidden, turn);
      await ctx.turnEnd(shown, turn);
      const started = hidden.events().find((e) => e.type === 'delegate.started');
      if (!started)
        throw new CheckFailure(
          'the planner stream has delegate.started',
          'delegate.started',
          hidden.events().map((e) => e.type),
        );
      const worker = started.payload.worker_session_id;
      expectEqual(
        'workers hidden: no worker event',
        [],
        hidden
          .events()
          .filter((e) => e.session_id === worker)
          .map((e) => e.type),
      );
      const workerTypes = shown
        .events()
        .filter((e) => e.session_id === worker)
        .map((e) => e.type);
      expectTrue(
        "workers included: the worker's turn is in the stream",
        workerTypes.includes('turn.completed'),
        workerTypes,
      );
      const direct = await ctx.attach(worker, { filter: 'preset:full', snapshot: true });
      const snapshot = await direct.waitFor((f) => f.type === 'snapshot', 10_000, 'snapshot');
      expectEqual('a worker session can be attached directly', worker, snapshot.session.id);
      return undefined;
    },
  },
  {
    name: 'invalid_filter',
    covers: '§11.1 test 13, §9.3',
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session, {
        filter: { event_types: ['made.up.thing'], actors: null, include_worker_sessions: false },
      });
      const answer = client.frames.find((f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error');
      expectEqual('an unknown type in the filter is refused', 'invalid_filter', answer?.code ?? answer?.type);
      expectTrue(
        'the error names the offending type',
        String(answer?.message).includes('made.up.thing'),
        answer?.message,
      );
      client.send({
        type: 'subscribe',
        filter: {
          event_types: ['text.delta', 'route.decided'],
          actors: null,
          include_worker_sessions: false,
        },
        since: null,
        snapshot: false,
      });
      const ack = await client.waitFor(
        (f) => f.type === 'subscribe_ack' || (f.type === 'subscribe_error' && f !== answer),
        10_000,
        'a second answer',
      );
      expectEqual(
        'streaming-only and catalog types are both valid filter entries',
        'subscribe_ack',
        ack.type,
      );
      return undefined;
    },
  },
  {
    name: 'forward_compatibility',
    covers: '§11.1 test 14, §9.2',
    needsHooks: true,
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(
        session,
        { filter: { event_types: null, actors: null, include_worker_sessions: false } },
        { record: false },
      );
      const injected = await ctx.api('POST', '/_conformance/unknown', { session_id: session });
      expectEqual('the unknown-type hook answers 200', 200, injected.status);
      await ctx.eventOf(client, 'conformance.future_type');
      const turn = await ctx.submit(session, 'hello');
      await ctx.turnEnd(client, turn);
      return 'an event of a future type reached the client and the stream carried on';
    },
  },
];
