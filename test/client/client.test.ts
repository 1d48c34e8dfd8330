import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  type ClientItem,
  type ClientOptions,
  MetisClient,
  receivesEverySeq,
} from '../../src/client/client.js';
import { type ConversationState, initialState, reduce } from '../../src/client/reducer.js';
import { startServer } from '../../src/core/app/metis-server.js';
import { startService } from '../../src/core/app/start-service.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { PRESETS } from '../../src/core/events/presets.js';
import { STREAMING } from '../../src/core/events/streaming.js';
import { silentLogger } from '../../src/core/logger.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { eventually } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Fast reconnects for tests. */
const BACKOFF = { minMs: 10, maxMs: 100 };

interface Running {
  readonly client: MetisClient;
  readonly items: ClientItem[];
  /** Every event received, in order. */
  events(): any[];
  state(): ConversationState;
  /** Resolves with the first item (already received or to come) that matches. */
  waitFor(predicate: (item: ClientItem) => boolean, timeoutMs?: number): Promise<ClientItem>;
  waitForEvent(predicate: (event: any) => boolean, timeoutMs?: number): Promise<any>;
  /** Resolves when the iterator ended. */
  readonly ended: Promise<void>;
}

/** Starts a client and iterates it in the background, keeping every item. */
function run(options: ClientOptions): Running {
  const client = new MetisClient({ backoff: BACKOFF, ...options });
  const items: ClientItem[] = [];
  const waiters: { predicate: (item: ClientItem) => boolean; resolve: (item: ClientItem) => void }[] = [];
  let state = initialState;
  const ended = (async () => {
    for await (const item of client) {
      items.push(item);
      if (item.kind === 'frame') state = reduce(state, item.frame);
      for (const waiter of [...waiters]) {
        if (waiter.predicate(item)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(item);
        }
      }
    }
  })();
  onTestFinished(() => client.close());
  const waitFor = (predicate: (item: ClientItem) => boolean, timeoutMs = 15_000) => {
    const found = items.find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise<ClientItem>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('timed out waiting for a client item')), timeoutMs);
      waiters.push({
        predicate,
        resolve: (item) => {
          clearTimeout(timer);
          resolve(item);
        },
      });
    });
  };
  return {
    client,
    items,
    events: () =>
      items.flatMap((i) => (i.kind === 'frame' && i.frame.type === 'event' ? [i.frame.event] : [])),
    state: () => state,
    waitFor,
    waitForEvent: async (predicate, timeoutMs) => {
      const item = await waitFor(
        (i) => i.kind === 'frame' && i.frame.type === 'event' && predicate(i.frame.event),
        timeoutMs,
      );
      return (item as Extract<ClientItem, { kind: 'frame' }>).frame.event;
    },
    ended,
  };
}

const connected = (item: ClientItem) => item.kind === 'status' && item.status === 'connected';
const turnEnd = (turnId: string) => (e: any) =>
  (e.type === 'turn.completed' || e.type === 'turn.cancelled') && e.turn_id === turnId;

/** Servers over one database file that can be stopped and started again (on the same port). */
function restartable() {
  const dbPath = join(tempDir(), 'metis.db');
  const workspace = tempDir('metis-ws-');
  const start = async (port: number) => {
    const context = openTraceContext({ dbPath, validation: 'strict' });
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      config: { scripted: { token_delay_ms: 0 } },
    });
    const server = await startServer(runtime, context, { port });
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      await server.close();
      await runtime.close();
      await context.close();
    };
    onTestFinished(stop);
    const post = async (path: string, body: unknown) =>
      (await fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }).then((r) => r.json())) as Record<string, any>;
    const createSession = async () =>
      (await post('/sessions', { workspace_path: workspace })).session_id as string;
    return { context, server, stop, post, createSession };
  };
  return { start };
}

describe('MetisClient against a real server', () => {
  it('attaches, takes a snapshot, follows a turn it submitted, and ends when closed', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const c = run({ url: t.url, sessionId, filter: 'preset:full', snapshot: true });
    await c.waitFor(connected);
    const turnId = await c.client.submitTurn('hello');
    await c.waitForEvent(turnEnd(turnId));

    const frames = c.items.flatMap((i) => (i.kind === 'frame' ? [i.frame.type] : []));
    expect(frames.slice(0, 2)).toEqual(['subscribe_ack', 'snapshot']);
    expect(c.items[0]).toMatchObject({ kind: 'status', status: 'connecting' });
    expect(c.items.some((i) => i.kind === 'gap' || i.kind === 'resync')).toBe(false);
    const state = c.state();
    expect(state.messages).toMatchObject([
      { role: 'assistant', status: 'complete', blocks: [{ type: 'text', text: 'You said: hello' }] },
    ]);
    expect(state.turns[turnId]).toMatchObject({ status: 'completed', llm_calls: 1 });
    expect(state.mismatches).toBe(0);
    expect(c.client.cursor).toBe(c.events().at(-1).id);
    c.client.close();
    await c.ended;
  });

  it('reconnects after a server restart on the same port and database, resuming from its cursor', async () => {
    const { start } = restartable();
    const first = await start(0);
    const sessionId = await first.createSession();
    const c = run({ url: first.server.url, sessionId, filter: 'preset:full', snapshot: true });
    await c.waitFor(connected);
    const turn1 = (await first.post(`/sessions/${sessionId}/turns`, { message: 'hello one' })).turn_id;
    await c.waitForEvent(turnEnd(turn1));
    const cursorBeforeRestart = c.client.cursor;

    await first.stop();
    await c.waitFor((i) => i.kind === 'status' && i.status === 'reconnecting');
    const second = await start(first.server.port);
    // Submitted at once: the client may still be backing off, so it gets this turn by replay or live.
    const turn2 = (await second.post(`/sessions/${sessionId}/turns`, { message: 'hello two' })).turn_id;
    await c.waitForEvent(turnEnd(turn2));
    expect(c.items.filter(connected)).toHaveLength(2);
    // The second subscribe resumed from the cursor: no second snapshot.
    const acks = c.items.flatMap((i) =>
      i.kind === 'frame' && i.frame.type === 'subscribe_ack' ? [i.frame] : [],
    );
    expect(acks.map((a) => [a.snapshot, a.since])).toEqual([
      [true, null],
      [false, expect.any(String)],
    ]);
    expect(acks[1]!.since >= cursorBeforeRestart!).toBe(true);

    // Everything the store holds for the session after the snapshot reached the client exactly once,
    // and the streaming events rebuilt both answers exactly.
    await second.context.flush();
    const snapshotAt = c.items.find((i) => i.kind === 'frame' && i.frame.type === 'snapshot')!;
    const after = (snapshotAt as any).frame.snapshot_at_event_id as string;
    const stored = second.context.db
      .prepare('SELECT id FROM events WHERE session_id = ? AND id > ? ORDER BY id')
      .pluck()
      .all(sessionId, after) as string[];
    const received = () =>
      c
        .events()
        .filter((e) => !STREAMING.has(e.type))
        .map((e) => e.id);
    expect(await eventually(() => received().length >= stored.length)).toBe(true);
    expect(received()).toEqual(stored);
    const ids = c.events().map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    const state = c.state();
    expect(state.mismatches).toBe(0);
    expect(state.messages.map((m) => m.blocks)).toEqual([
      [{ type: 'text', text: 'You said: hello one' }],
      [{ type: 'text', text: 'You said: hello two' }],
    ]);
    expect(Object.values(state.turns).map((t) => t.status)).toEqual(['completed', 'completed']);
  });

  it('resubscribes with a snapshot on replay_too_large and says so with a resync item', async () => {
    const t = await startTestServer({}, { stream: { replayCap: 5 } });
    const sessionId = await t.createSession();
    const turnId = await t.submit(sessionId, 'hello');
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    const firstId = t.context.db
      .prepare('SELECT id FROM events WHERE session_id = ? ORDER BY id LIMIT 1')
      .pluck()
      .get(sessionId) as string;

    const c = run({ url: t.url, sessionId, filter: 'preset:full', since: firstId, snapshot: false });
    const resync = await c.waitFor((i) => i.kind === 'resync');
    expect(resync).toMatchObject({ kind: 'resync', reason: expect.stringContaining('replay_too_large') });
    await c.waitFor(connected);
    const snapshot = (await c.waitFor((i) => i.kind === 'frame' && i.frame.type === 'snapshot')) as any;
    expect(snapshot.frame.messages.map((m: any) => m.role)).toEqual(['user', 'assistant']);
    expect(c.client.cursor).toBe(snapshot.frame.snapshot_at_event_id);
    // The resync came before the connection was established, and nothing of the gap was replayed.
    const kinds = c.items.map((i) => (i.kind === 'frame' ? i.frame.type : i.kind));
    expect(kinds.indexOf('resync')).toBeLessThan(kinds.indexOf('subscribe_ack'));
    expect(c.events()).toEqual([]);
    expect(c.state().messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(turnId).toMatch(/^turn_/);

    // It then follows live.
    const next = await c.client.submitTurn('again');
    await c.waitForEvent(turnEnd(next));
    expect(c.state().messages.at(-1)!.blocks).toEqual([{ type: 'text', text: 'You said: again' }]);
  });

  it('answers pings: with a 50 ms heartbeat an idle connection stays open well past three intervals', async () => {
    const t = await startTestServer({}, { stream: { heartbeatIntervalMs: 50 } });
    const sessionId = await t.createSession();
    const c = run({ url: t.url, sessionId, filter: 'preset:chat', snapshot: true });
    await c.waitFor(connected);
    // The client answers pings without yielding them; count them on its socket.
    const ws = (c.client as unknown as { ws: import('ws').WebSocket }).ws;
    let pings = 0;
    ws.on('message', (data) => {
      if (String(data).startsWith('{"type":"ping"')) pings += 1;
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(pings).toBeGreaterThanOrEqual(4);
    expect(ws.readyState).toBe(ws.OPEN);
    expect(t.server.hub.connectionCount()).toBe(1);
    expect(c.items.filter((i) => i.kind === 'status').map((i) => (i as any).status)).toEqual([
      'connecting',
      'connected',
    ]);
    // Still a working stream.
    const turnId = await c.client.submitTurn('still here');
    await c.waitForEvent(turnEnd(turnId));
  });

  it('submitTurn() passes the model; cancel() cancels over the socket, and over HTTP when not connected', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 5, slow_tokens: 400 } });
    const sessionId = await t.createSession();
    const c = run({ url: t.url, sessionId, filter: 'preset:chat', snapshot: false });
    await c.waitFor(connected);

    const first = await c.client.submitTurn('slow: a long story', { model: 'scripted:fast' });
    const route = await c.waitForEvent((e) => e.type === 'route.decided' && e.turn_id === first);
    expect(route.payload.chosen_model).toBe('scripted:fast');
    await eventually(() => c.events().filter((e) => e.type === 'text.delta').length >= 3);
    await c.client.cancel(first);
    const cancelled = await c.waitForEvent(turnEnd(first));
    expect(cancelled).toMatchObject({ type: 'turn.cancelled', payload: { reason: 'user_cancel' } });
    expect(c.state().messages.at(-1)).toMatchObject({ status: 'cancelled' });

    // A client that never connected cancels over HTTP.
    const offline = new MetisClient({ url: t.url, sessionId });
    const second = await offline.submitTurn('slow: another story');
    await eventually(
      () => c.events().filter((e) => e.type === 'text.delta' && e.turn_id === second).length >= 3,
    );
    await offline.cancel(second);
    await expect(c.waitForEvent(turnEnd(second))).resolves.toMatchObject({ type: 'turn.cancelled' });
    expect(c.state().turns[second]).toMatchObject({ status: 'cancelled', cancel_reason: 'user_cancel' });

    // Errors carry the server's status and code.
    await expect(offline.cancel('turn_nope')).rejects.toMatchObject({ status: 404 });
  });

  it('confirm() answers a tool confirmation', async () => {
    const t = await startTestServer({
      tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
    });
    const sessionId = await t.createSession();
    const c = run({ url: t.url, sessionId, filter: 'preset:chat', snapshot: false });
    await c.waitFor(connected);
    const turnId = await c.client.submitTurn('run: echo confirmed');
    const requested = await c.waitForEvent((e) => e.type === 'tool.confirmation_requested');
    const requestId = requested.payload.confirmation_request_id;
    expect(c.state().confirmations[requestId]).toMatchObject({ status: 'pending', tool_name: 'shell' });
    await c.client.confirm(requestId, 'allow');
    await c.waitForEvent(turnEnd(turnId));
    expect(c.state().confirmations[requestId]!.status).toBe('allow');
    expect(Object.values(c.state().tools)).toMatchObject([{ tool_name: 'shell', status: 'completed' }]);
  });

  it('ends the iterator on a subscribe_error that retrying cannot fix (invalid_filter)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const c = run({
      url: t.url,
      sessionId,
      filter: { event_types: ['made.up.thing'], actors: null, include_worker_sessions: false },
    });
    await c.ended;
    const last = c.items.at(-1) as any;
    expect(last).toMatchObject({ kind: 'frame', frame: { type: 'subscribe_error', code: 'invalid_filter' } });
    expect(c.items.some((i) => i.kind === 'status' && i.status === 'reconnecting')).toBe(false);
  });

  it('gives up (and ends) when the session does not exist', async () => {
    const t = await startTestServer();
    const c = run({ url: t.url, sessionId: 'sess_does_not_exist' });
    await c.ended;
    expect(c.items.at(-1)).toMatchObject({ kind: 'status', detail: expect.stringContaining('giving up') });
  });
});

describe('MetisClient: seq holes', () => {
  it('decides from the resolved filter whether seq can have holes', () => {
    const all = [...PRESETS['preset:full']];
    expect(receivesEverySeq({ event_types: null, actors: null, include_worker_sessions: false })).toBe(true);
    expect(receivesEverySeq({ event_types: all, actors: null, include_worker_sessions: true })).toBe(true);
    // Streaming-only types carry seq: null, so every catalog type is what counts.
    expect(receivesEverySeq({ event_types: [...CATALOG.keys()], actors: null })).toBe(true);
    const withoutOne = all.filter((type) => type !== 'tool.completed');
    expect(receivesEverySeq({ event_types: withoutOne, actors: null })).toBe(false);
    expect(receivesEverySeq({ event_types: [...PRESETS['preset:chat']], actors: null })).toBe(false);
    expect(receivesEverySeq({ event_types: all, actors: ['agent'] })).toBe(false);
    expect(receivesEverySeq(undefined)).toBe(false);
  });

  it('reports the hole the drop-at-seam fault makes for an object filter of every type (+ workers), and none for some types', async () => {
    const config = MetisConfigSchema.parse({ server: { port: 0 } });
    const dir = tempDir();
    const service = await startService(config, join(dir, 'metis.db'), silentLogger(), {
      conformance: { faults: ['drop-at-seam'] },
      tokenFile: join(dir, 'token'),
    });
    onTestFinished(() => service.stop());
    const token = service.auth.token ?? undefined;
    const post = async (path: string, body: unknown) =>
      (await fetch(`${service.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      }).then((r) => r.json())) as Record<string, any>;
    const sessionId = (await post('/sessions', { workspace_path: tempDir('metis-ws-') }))
      .session_id as string;
    // A first turn gives the clients a replay, so they know a seq before the first live event.
    await post(`/sessions/${sessionId}/turns`, { message: 'hello one' });
    await service.runtime.currentTurn(sessionId)?.done;
    await service.trace.flush();
    const firstId = service.trace.db
      .prepare('SELECT id FROM events WHERE session_id = ? ORDER BY id LIMIT 1')
      .pluck()
      .get(sessionId) as string;

    const full = run({
      url: service.url,
      token,
      sessionId,
      filter: { event_types: [...PRESETS['preset:full']], actors: null, include_worker_sessions: true },
      since: firstId,
    });
    const some = run({
      url: service.url,
      token,
      sessionId,
      filter: {
        event_types: ['turn.started', 'turn.completed'],
        actors: null,
        include_worker_sessions: true,
      },
      since: firstId,
    });
    await full.waitFor(connected);
    await some.waitFor(connected);
    const turnId = (await post(`/sessions/${sessionId}/turns`, { message: 'hello two' })).turn_id as string;
    await full.waitForEvent(turnEnd(turnId));
    await some.waitForEvent(turnEnd(turnId));

    // The fault dropped one live event of the full client: exactly that hole is reported.
    await service.trace.flush();
    const stored = service.trace.db
      .prepare('SELECT seq FROM events WHERE session_id = ? AND id > ? ORDER BY id')
      .pluck()
      .all(sessionId, firstId) as number[];
    const received = new Set(full.events().flatMap((e) => (e.seq === null ? [] : [e.seq])));
    const missing = stored.filter((seq) => !received.has(seq) && seq <= Math.max(...received));
    expect(missing).toHaveLength(1);
    const dropped = missing[0]!;
    expect(full.items.filter((i) => i.kind === 'gap')).toEqual([
      { kind: 'gap', session_id: sessionId, after_seq: dropped - 1, next_seq: dropped + 1 },
    ]);
    // The other client's seqs have holes by construction (and lost its first live event too): no gap.
    expect(some.events().map((e) => e.type)).toContain('turn.completed');
    expect(some.items.some((i) => i.kind === 'gap')).toBe(false);
  }, 60_000);

  it('starts checking after a snapshot from the first live event (the snapshot carries no seq)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    await t.submit(sessionId, 'hello one');
    await t.runtime.currentTurn(sessionId)?.done;
    const c = run({ url: t.url, sessionId, filter: 'preset:full', snapshot: true });
    await c.waitFor((i) => i.kind === 'frame' && i.frame.type === 'snapshot');
    const turnId = await c.client.submitTurn('hello two');
    await c.waitForEvent(turnEnd(turnId));
    // The session's seq went on from the first turn's; the client only knows it from the first live event.
    expect(c.events().find((e) => e.seq !== null).seq).toBeGreaterThan(1);
    expect(c.items.some((i) => i.kind === 'gap')).toBe(false);
  });
});
