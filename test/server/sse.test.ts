import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { EventSource } from 'eventsource';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { emitPadded } from '../helpers/flood.js';
import { freePort } from '../helpers/free-port.js';
import { startTestServer } from '../helpers/server.js';
import { serverOnFile } from '../helpers/server-on-file.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 15 point 3: `GET /sessions/{id}/events`, the WebSocket subscription as server-sent events, read
 * by the `eventsource` package (a client nobody here wrote) and by raw HTTP.
 */

interface Received {
  readonly named: { type: string; data: any }[];
  readonly events: MetisEvent[];
  readonly ids: string[];
  source: EventSource;
}

const NAMED = ['subscribe_ack', 'snapshot', 'subscribe_error', 'lag_warning', 'stream_error', 'close'];

function follow(url: string): Received {
  const source = new EventSource(url);
  const received: Received = { named: [], events: [], ids: [], source };
  source.onmessage = (message) => {
    received.events.push(JSON.parse(message.data).event);
    received.ids.push(message.lastEventId);
  };
  for (const type of NAMED)
    source.addEventListener(type, (message) => received.named.push({ type, data: JSON.parse(message.data) }));
  onTestFinished(() => source.close());
  return received;
}

async function until(condition: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The whole body of a GET, for streams the server ends. */
function readAll(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('server-sent events', () => {
  it('snapshot, then the turn as it streams: the same events, in order, with id = event id', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const received = follow(`${t.url}/sessions/${sessionId}/events`);
    await until(() => received.named.some((n) => n.type === 'snapshot'), 'the snapshot');
    expect(received.named.map((n) => n.type)).toEqual(['subscribe_ack', 'snapshot']);
    expect(received.named[0]!.data).toMatchObject({ snapshot: true, since: null });
    const turnId = await t.submit(sessionId, 'think: time');
    await until(() => received.events.some((e) => e.type === 'turn.completed'), 'turn.completed');

    const types = received.events.map((e) => e.type);
    expect(types[0]).toBe('turn.started');
    for (const type of ['thinking.delta', 'text.delta', 'tool.called', 'tool.completed', 'message.complete'])
      expect(types).toContain(type);
    expect(received.ids).toEqual(received.events.map((e) => e.id));
    expect([...received.ids].sort()).toEqual(received.ids);
    expect(new Set(received.ids).size).toBe(received.ids.length);
    // The same as a WebSocket subscriber with the same filter, from the same point.
    const ws = await t.attach(sessionId);
    ws.send({
      type: 'subscribe',
      filter: 'preset:chat',
      since: received.named[1]!.data.snapshot_at_event_id,
    });
    await ws.waitFor((f) => f.type === 'event' && f.event.type === 'turn.completed');
    expect(ws.events().map((e) => e.id)).toEqual(received.ids);
    expect(received.events.every((e) => e.turn_id === turnId)).toBe(true);
  });

  it('resumes with Last-Event-ID across a server restart: what was missed, once, in order', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const port = await freePort();
    const first = await serverOnFile(dbPath, { server: { port } });
    const created = await fetch(`${first.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    const sessionId = ((await created.json()) as { session_id: string }).session_id;
    const submit = (url: string, message: string) =>
      fetch(`${url}/sessions/${sessionId}/turns`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message }),
      });
    const received = follow(`${first.url}/sessions/${sessionId}/events?filter=preset:full`);
    await submit(first.url, 'hello');
    await until(() => received.events.some((e) => e.type === 'turn.completed'), 'the first turn');
    const lastBefore = received.ids.at(-1)!;
    await first.stop();
    await until(() => received.named.some((n) => n.type === 'close'), 'the close event');
    expect(received.named.find((n) => n.type === 'close')!.data).toMatchObject({ code: 1001 });

    // The second turn runs while the client is away; it reconnects by itself with Last-Event-ID.
    const second = await serverOnFile(dbPath, { server: { port } });
    await submit(second.url, 'hello again');
    await until(
      () => received.events.filter((e) => e.type === 'turn.completed').length === 2,
      'the missed turn, replayed',
    );
    const acks = received.named.filter((n) => n.type === 'subscribe_ack');
    expect(acks).toHaveLength(2);
    expect(acks[1]!.data).toMatchObject({ since: lastBefore, snapshot: false });
    expect(new Set(received.ids).size).toBe(received.ids.length);
    expect([...received.ids].sort()).toEqual(received.ids);
    const secondTurn = received.events.filter((e) => e.id > lastBefore && e.turn_id !== null);
    expect(secondTurn.map((e) => e.type)).toEqual(
      expect.arrayContaining(['turn.started', 'text.delta', 'message.complete', 'turn.completed']),
    );
    // Every stored event of the session after the cursor arrived.
    const stored = second.context.db
      .prepare('SELECT id FROM events WHERE session_id = ? AND id > ? ORDER BY id')
      .pluck()
      .all(sessionId, lastBefore) as string[];
    const got = new Set(received.ids);
    expect(stored.filter((id) => !got.has(id))).toEqual([]);
  });

  it('bad input is a named HTTP error before the stream; a cursor past the window is a subscribe_error event', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const base = `${t.url}/sessions/${sessionId}/events`;
    const errorOf = async (url: string, headers: Record<string, string> = {}) => {
      const { status, body } = await readAll(url, headers);
      return { status, ...JSON.parse(body).error };
    };
    expect(await errorOf(`${t.url}/sessions/sess_nope/events`)).toMatchObject({
      status: 404,
      code: 'METIS_ERR_SESSION_NOT_FOUND',
    });
    expect(await errorOf(`${base}?filter=preset:everything`)).toMatchObject({
      status: 400,
      message: expect.stringContaining('filter: must be "preset:chat"'),
    });
    expect(await errorOf(`${base}?event_types=text.delta,no.such_type`)).toMatchObject({
      status: 400,
      code: 'METIS_ERR_INVALID_FILTER',
      message: 'unknown event types in filter: no.such_type',
    });
    expect(await errorOf(base, { 'last-event-id': 'evt_oops' })).toMatchObject({
      status: 400,
      message: 'Last-Event-ID: "evt_oops" is not an event id (evt_<ULID>)',
    });
    expect(await errorOf(`${base}?sinse=evt_1`)).toMatchObject({
      status: 400,
      message: expect.stringContaining('unknown query parameters: sinse'),
    });
    const post = await fetch(base, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET');

    // A cursor from before retention: the stream says why, then closes, and ends.
    const old = 'evt_01ARZ3NDEKTSV4RRFFQ69G5FAV';
    const { status, body } = await readAll(`${base}?since=${old}`);
    expect(status).toBe(200);
    expect(body).toMatch(/event: subscribe_error\ndata: \{"type":"subscribe_error","code":"cursor_expired"/);
    expect(body).toMatch(/event: close\ndata: \{"type":"close","code":4400,/);
  });

  it('heartbeats are SSE comments; a reader that stopped reading is closed, and nobody waits for it', async () => {
    const t = await startTestServer(
      {},
      {
        stream: {
          heartbeatIntervalMs: 50,
          maxQueueEvents: 50,
          maxQueueBytes: 256 * 1024 * 1024,
          socketHighWaterMark: 1024,
        },
      },
    );
    const sessionId = await t.createSession();
    const idle = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(`${t.url}/sessions/${sessionId}/events`, (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk) => {
          text += chunk;
          if (text.includes(': ping\n\n')) {
            req.destroy();
            resolve(text);
          }
        });
      });
      req.on('error', reject);
      req.end();
    });
    expect(idle).toContain('event: snapshot');

    // A reader that stops reading: its queue overflows and the server closes it with 1008.
    let body = '';
    let ended = false;
    const stalled = await new Promise<import('node:http').IncomingMessage>((resolve) => {
      const req = httpRequest(`${t.url}/sessions/${sessionId}/events?filter=preset:full`, resolve);
      req.end();
    });
    stalled.setEncoding('utf8');
    stalled.pause();
    const fast = follow(`${t.url}/sessions/${sessionId}/events?filter=preset:full`);
    await until(() => fast.named.some((n) => n.type === 'snapshot'), 'the other reader');
    await emitPadded(t, sessionId, 400);
    await until(() => fast.events.length >= 400, 'every event at the reader that reads');
    stalled.on('data', (chunk) => (body += chunk));
    stalled.on('end', () => (ended = true));
    stalled.resume();
    await until(() => ended, 'the stalled stream to end');
    expect(body).toMatch(/event: close\ndata: \{"type":"close","code":1008,"reason":".*client_too_slow/);
  });
});
