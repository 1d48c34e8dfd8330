import { describe, expect, it } from 'vitest';
import { SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import { captureLogs, settleLogs } from '../helpers/log-capture.js';
import {
  closedWithin,
  eventually,
  ofType,
  reconstruct,
  strictlyIncreasing,
  subscribe,
  subscribeOn,
  sync,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient } from '../helpers/server.js';
import { recordServer } from '../helpers/server-record.js';
import { slowReads } from '../helpers/slow-reads.js';

/** Streaming spec §11.1 tests 11 (slow client closure, §8) and 15 (heartbeats, §3.8). */

const pings = (client: TestClient) => client.frames.filter((f) => f.type === 'ping');

describe('streaming protocol: backpressure and heartbeats (§3.8, §8, §11.1)', () => {
  it('11. a client that stops reading is closed with 1008 client_too_slow; the other client is unaffected', async () => {
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 5000 } },
      { stream: { maxQueueEvents: 50, socketHighWaterMark: 1024 } },
    );
    const sessionId = await t.createSession();
    const { client: stalled } = await subscribe(t, sessionId);
    const { client: healthy } = await subscribe(t, sessionId);
    expect(t.server.hub.connectionCount()).toBe(2);
    // The stalled client stops reading: the kernel buffers fill, then the server's queue overflows.
    const socket = (stalled.ws as any)._socket;
    socket.pause();

    // How many megabytes it takes depends on the kernel's socket buffers: stream turns until it happens.
    const turns: string[] = [];
    while (t.server.hub.connectionCount() === 2 && turns.length < 20) {
      const turnId = await t.submit(sessionId, `slow: flood ${turns.length}`);
      turns.push(turnId);
      // The agent loop finishes the turn while the stalled client is still not reading (§8.3).
      await waitForEvents(healthy, (e) => e.type === 'turn.completed' && e.turn_id === turnId, 1, 30_000);
    }
    expect(await eventually(() => t.server.hub.connectionCount() === 1)).toBe(true);

    socket.resume();
    const { code, reason } = await closedWithin(stalled);
    expect(code).toBe(1008);
    expect(JSON.parse(reason)).toMatchObject({ code: 'client_too_slow' });
    // What the stalled client got before the close is an exact prefix of the stream: it can reconnect
    // with `since` = its last event.
    const got = stalled.events();
    expect(got.length).toBeGreaterThan(0);
    expect(got).toEqual(healthy.events().slice(0, got.length));
    expect(got.some((e) => e.type === 'turn.completed' && e.turn_id === turns.at(-1))).toBe(false);
    // The healthy client got every turn in full.
    const events = healthy.events();
    expect(events.filter((e) => e.type === 'turn.completed').map((e) => e.turn_id)).toEqual(turns);
    const completes = ofType(events, 'message.complete');
    expect(completes).toHaveLength(turns.length);
    for (const { payload } of completes) {
      expect(payload.stop_reason).toBe('end_turn');
      expect(reconstruct(events, payload.message_id)).toEqual(payload.final_content);
    }
    expect(strictlyIncreasing(events)).toBe(true);
    expect(healthy.ws.readyState).toBe(healthy.ws.OPEN);
  });

  it('11d. a client that attaches and does not subscribe yet is never closed for it; the server holds at most the bound for it (§3.7 step 1, §8.1, issue 14 obs. 8)', async () => {
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 200 } },
      { stream: { maxQueueEvents: 50 } },
    );
    const sessionId = await t.createSession();
    const { client: healthy } = await subscribe(t, sessionId, { snapshot: false });
    const idle = await t.attach(sessionId); // subscribes only after the turn
    const turnId = await t.submit(sessionId, 'slow: more than fifty deltas');
    await waitForEvents(healthy, (e) => e.type === 'turn.completed' && e.turn_id === turnId, 1, 30_000);
    expect(healthy.events().length).toBeGreaterThan(50);
    // Past the bound the early socket keeps its cursor, not the events.
    const early = [...((t.server.hub as any).targets.get(sessionId) as Set<any>)].find(
      (target) => target.state === 'awaiting_subscribe',
    );
    expect(early.accepted.events).toHaveLength(0);
    expect(await sync(idle)).toBe(true);
    await subscribeOn(idle, { snapshot: false });
    expect(await sync(idle)).toBe(true);
    // A live subscribe gets everything since accept: what the healthy client saw of the turn.
    const ofTurn = (events: any[]) => events.filter((e) => e.turn_id === turnId);
    expect(ofTurn(idle.events())).toEqual(ofTurn(healthy.events()));
    expect(idle.ws.readyState).toBe(idle.ws.OPEN);
    expect(healthy.ws.readyState).toBe(healthy.ws.OPEN);
  });

  it('11e. a socket past the accept bound that subscribes while turns run and the store answers slowly misses nothing released during the reads', async () => {
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 100 } },
      // Every read takes the full 30 ms: events keep being released while the subscribe waits on them.
      { stream: { maxQueueEvents: 50 }, wrapStreamReads: (reads) => slowReads(reads, 30, () => 1) },
    );
    const sessionId = await t.createSession();
    const { client: healthy } = await subscribe(t, sessionId, { snapshot: false });
    const idle = await t.attach(sessionId);
    const first = await t.submit(sessionId, 'slow: past the bound');
    await waitForEvents(healthy, (e) => e.type === 'turn.completed' && e.turn_id === first, 1, 30_000);
    // The idle socket is served by its cursor now; short turns back to back store events during its reads.
    const driver = (async () => {
      for (let i = 0; i < 6; i += 1) {
        const turnId = await t.submit(sessionId, i % 2 === 0 ? 'hello' : 'time');
        await waitForEvents(healthy, (e) => e.type === 'turn.completed' && e.turn_id === turnId, 1, 30_000);
      }
    })();
    await waitForEvents(healthy, (e) => e.type === 'turn.started' && e.turn_id !== first, 1, 30_000);
    await subscribeOn(idle, { snapshot: false });
    await driver;
    expect(await sync(healthy)).toBe(true);
    expect(await sync(idle)).toBe(true);
    expect(idle.events().map((e) => e.id)).toEqual(healthy.events().map((e) => e.id));
    expect(strictlyIncreasing(idle.events())).toBe(true);
  });

  it('11c. the byte cap never closes a client that keeps reading, even for one frame bigger than the cap', async () => {
    const maxQueueBytes = 16 * 1024;
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 2000 } },
      { stream: { maxQueueEvents: 1000, maxQueueBytes } },
    );
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const turnId = await t.submit(sessionId, 'slow: one long answer');
    await waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId, 1, 30_000);
    const complete = client.frames.find((f) => f.type === 'event' && f.event.type === 'message.complete');
    // The final message alone is larger than the whole byte cap, and the client still got it.
    expect(Buffer.byteLength(JSON.stringify(complete))).toBeGreaterThan(maxQueueBytes);
    expect(t.server.hub.connectionCount()).toBe(1);
  });

  it('11b. the byte cap: a client that stops reading is closed with 1008 and the §8.2 reason once max_queue_bytes overflows, far below the event cap', async () => {
    const maxQueueEvents = 1_000_000; // out of reach: only the byte cap can close anyone here
    const maxQueueBytes = 256 * 1024;
    const logs = captureLogs('warn');
    const t = await startTestServer(
      { scripted: { slow_token_delay_ms: 0, slow_tokens: 2000 } },
      { stream: { maxQueueEvents, maxQueueBytes, socketHighWaterMark: 1024 }, logger: logs.logger },
    );
    const sessionId = await t.createSession();
    const { client: stalled } = await subscribe(t, sessionId);
    const { client: healthy } = await subscribe(t, sessionId);
    const socket = (stalled.ws as any)._socket;
    socket.pause();

    const turns: string[] = [];
    while (t.server.hub.connectionCount() === 2 && turns.length < 40) {
      const turnId = await t.submit(sessionId, `slow: bytes ${turns.length}`);
      turns.push(turnId);
      await waitForEvents(healthy, (e) => e.type === 'turn.completed' && e.turn_id === turnId, 1, 30_000);
    }
    expect(await eventually(() => t.server.hub.connectionCount() === 1)).toBe(true);
    socket.resume();
    const { code, reason } = await closedWithin(stalled);
    expect(code).toBe(1008);
    expect(JSON.parse(reason)).toEqual({
      code: 'client_too_slow',
      message: 'Outbound queue overflowed; reconnect with replay.',
    });
    // The event cap cannot have been the cause: the whole flood is a small fraction of it.
    const events = healthy.events();
    expect(events.length).toBeLessThan(maxQueueEvents / 10);
    // The server's own account of the close: fewer frames queued than even the default event cap (1000),
    // and they are the ones the stalled client never got.
    await settleLogs();
    const closes = logs.records.filter((r) => r.msg.startsWith('client too slow'));
    expect(closes).toHaveLength(1);
    const queued = closes[0]!.queued as number;
    expect(queued).toBeGreaterThan(0);
    expect(queued).toBeLessThan(1000);
    const got = stalled.events();
    expect(got).toEqual(events.slice(0, got.length));
    // The frames queued at the close are the first ones it missed: their bytes crossed the bound with
    // the last of them, not before.
    const missed = events.slice(got.length, got.length + queued);
    const bytes = (e: any) => {
      const length = Buffer.byteLength(`{"type":"event","event":${JSON.stringify(e)}}`);
      return length + (length < 126 ? 2 : length < 65_536 ? 4 : 10);
    };
    const total = missed.reduce((sum, e) => sum + bytes(e), 0);
    expect(total).toBeGreaterThan(maxQueueBytes);
    expect(total - bytes(missed.at(-1))).toBeLessThanOrEqual(maxQueueBytes);
    // The healthy reader was not touched by the byte cap and got every turn.
    expect(healthy.ws.readyState).toBe(healthy.ws.OPEN);
    expect(ofType(events, 'turn.completed').map((e) => e.turn_id)).toEqual(turns);
  });

  it("15b. the conformance flood's hold: no ping and no heartbeat close while held, then three pings close a silent client", async () => {
    const t = await startTestServer({}, { stream: { heartbeatIntervalMs: 50 } });
    const sessionId = await t.createSession();
    const { client: silent } = await subscribeOn(await t.attach(sessionId, { autoPong: false }));
    const release = t.server.hub.holdHeartbeats(sessionId);
    // Twice the three pings that close a silent client, held: it gets none and stays open.
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(pings(silent)).toHaveLength(0);
    expect(silent.ws.readyState).toBe(silent.ws.OPEN);
    release();
    const { code } = await closedWithin(silent);
    expect(code).toBe(4408);
    expect(pings(silent)).toHaveLength(3);
    expect(t.server.hub.heartbeatsHeld(sessionId)).toBe(false);
  });

  it('15. heartbeat: idle clients get pings; a client answering pongs stays, a silent one is closed after 3', async () => {
    const t = await startTestServer({}, { stream: { heartbeatIntervalMs: 50 } });
    const sessionId = await t.createSession();
    const { client: answering } = await subscribe(t, sessionId);
    // These two do not answer protocol pings either (a protocol pong is liveness too, issue 14 obs. 9).
    const { client: silent } = await subscribeOn(await t.attach(sessionId, { autoPong: false }));
    // Pongs that answer no ping (a wrong nonce) prove nothing: this client is closed like a silent one.
    const { client: wrongNonce } = await subscribeOn(await t.attach(sessionId, { autoPong: false }));
    answering.ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === 'ping') answering.send({ type: 'pong', nonce: frame.nonce });
    });
    wrongNonce.ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === 'ping') wrongNonce.send({ type: 'pong', nonce: `not-${frame.nonce}` });
    });

    const { code, reason } = await closedWithin(silent);
    expect(code).toBe(4408);
    expect((await closedWithin(wrongNonce)).code).toBe(4408);
    expect(pings(wrongNonce)).toHaveLength(3);
    expect(JSON.parse(reason)).toMatchObject({ code: 'heartbeat_timeout' });
    const silentPings = pings(silent);
    expect(silentPings).toHaveLength(3);
    for (const ping of silentPings) expect(ping.nonce).toMatch(/^\S+$/);
    expect(new Set(silentPings.map((p) => p.nonce)).size).toBe(3);

    // The answering client outlives three more pings than the silent one was allowed, and is still open.
    const before = pings(answering).length;
    expect(before).toBeGreaterThanOrEqual(3);
    await answering.waitFor(() => pings(answering).length >= before + 4, 10_000);
    expect(answering.ws.readyState).toBe(answering.ws.OPEN);
    // Either side can drive heartbeats: a client ping gets a pong with the same nonce.
    expect(await sync(answering)).toBe(true);
  });

  it('disconnect (§3.6): each subscribed client that goes away is logged as bus.subscriber_unregistered, once', async () => {
    const t = await startTestServer();
    const record = recordServer(t);
    const sessionId = await t.createSession();
    const meta = (type: string) =>
      record
        .of(SYSTEM_SESSION_ID, [type])
        .filter((e) => String(e.payload.subscription_name).endsWith(`:${sessionId}`));
    const registered = async (count: number) => {
      await record.waitFor(() => meta('bus.subscriber_registered').length >= count);
      return meta('bus.subscriber_registered')[count - 1].payload.subscription_name as string;
    };
    const unregistered = async (name: string) => {
      const event = await record.waitFor(
        (e) => e.type === 'bus.subscriber_unregistered' && e.payload.subscription_name === name,
      );
      return JSON.parse(JSON.stringify(event));
    };

    const { client: polite } = await subscribe(t, sessionId);
    const politeName = await registered(1);
    const { client: abrupt } = await subscribe(t, sessionId);
    const abruptName = await registered(2);
    const { client: remaining } = await subscribe(t, sessionId);
    const remainingName = await registered(3);
    const neverSubscribed = await t.attach(sessionId);
    expect(t.server.hub.connectionCount()).toBe(4);
    await t.context.flush();
    expect(meta('bus.subscriber_unregistered')).toEqual([]);

    polite.close(); // a close handshake
    expect(await unregistered(politeName)).toMatchObject({
      session_id: SYSTEM_SESSION_ID,
      type: 'bus.subscriber_unregistered',
      payload: { subscription_name: politeName, reason: 'client_disconnect' },
    });
    abrupt.ws.terminate(); // no close frame: the socket just goes away
    expect((await unregistered(abruptName)).payload.reason).toBe('client_disconnect');
    // A connection that never subscribed was never registered, so nothing is unregistered for it.
    neverSubscribed.ws.terminate();
    expect(await eventually(() => t.server.hub.connectionCount() === 1)).toBe(true);
    await t.context.flush();
    expect(meta('bus.subscriber_unregistered').map((e) => e.payload.subscription_name)).toEqual([
      politeName,
      abruptName,
    ]);
    // The meta-event is persisted like any bus event, and the client still attached is unaffected.
    const stored = t.context.store
      .sessionEvents(SYSTEM_SESSION_ID)
      .filter((e) => e.type === 'bus.subscriber_unregistered')
      .map((e) => e.payload.subscription_name);
    expect(stored).toEqual(expect.arrayContaining([politeName, abruptName]));
    expect(await sync(remaining)).toBe(true);

    // A server shutdown unregisters the last one, with its own reason.
    await t.server.close();
    expect((await unregistered(remainingName)).payload.reason).toBe('shutdown');
    await t.context.flush();
    expect(meta('bus.subscriber_unregistered')).toHaveLength(3);
  });
});
