import { describe, expect, it } from 'vitest';
import {
  closedWithin,
  eventually,
  ofType,
  reconstruct,
  strictlyIncreasing,
  subscribe,
  sync,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient } from '../helpers/server.js';

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

  it('15. heartbeat: idle clients get pings; a client answering pongs stays, a silent one is closed after 3', async () => {
    const t = await startTestServer({}, { stream: { heartbeatIntervalMs: 50 } });
    const sessionId = await t.createSession();
    const { client: answering } = await subscribe(t, sessionId);
    const { client: silent } = await subscribe(t, sessionId);
    answering.ws.on('message', (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === 'ping') answering.send({ type: 'pong', nonce: frame.nonce });
    });

    const { code, reason } = await closedWithin(silent);
    expect(code).toBe(4408);
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
});
