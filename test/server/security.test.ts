import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startServer } from '../../src/core/app/metis-server.js';
import { isMetisError } from '../../src/core/errors.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { openClient, startTestServer, type TestClient } from '../helpers/server.js';
import { tempTraceContext } from '../helpers/tmp.js';

const MIB = 1024 * 1024;

interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  body: any;
}

/**
 * One request over node:http with exactly the headers given (fetch forbids setting `Host`). `chunks`
 * sends the body with chunked transfer encoding, so the server cannot see its size up front.
 */
function raw(
  baseUrl: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: string | Buffer; chunks?: Buffer[] } = {},
): Promise<RawResponse> {
  const url = new URL(path, baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: `${url.pathname}${url.search}`,
        method,
        headers: options.headers ?? {},
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: any = null;
          try {
            body = text ? JSON.parse(text) : null;
          } catch {
            body = text;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (options.chunks) {
      for (const chunk of options.chunks) req.write(chunk);
      req.end();
    } else {
      req.end(options.body);
    }
  });
}

/** Writes a raw request on a fresh TCP connection and resolves with the status line of the answer. */
function rawSocket(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (received.includes('\r\n')) {
        socket.destroy();
        resolve(received.slice(0, received.indexOf('\r\n')));
      }
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(received));
    socket.write(text);
  });
}

/** A WebSocket upgrade attempt: the HTTP status it got back, and whether a socket opened. */
function tryUpgrade(
  url: string,
  options: WebSocket.ClientOptions = {},
): Promise<{ status: number; opened: boolean; ws: WebSocket }> {
  return new Promise<{ status: number; opened: boolean; ws: WebSocket }>((resolve, reject) => {
    const ws = new WebSocket(url, options);
    ws.on('unexpected-response', (req, res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, opened: false, ws });
      req.destroy();
    });
    ws.on('open', () => {
      resolve({ status: 101, opened: true, ws });
    });
    ws.on('error', (error) => reject(error));
  }).then((result) => {
    // Errors after the outcome is known (the aborted request) are expected and not interesting.
    result.ws.removeAllListeners('error');
    result.ws.on('error', () => undefined);
    if (result.opened) result.ws.terminate();
    return result;
  });
}

function expectErrorShape(body: any, code?: string): void {
  expect(body).toEqual({ error: { code: expect.any(String), message: expect.any(String) } });
  if (code !== undefined) expect(body.error.code).toBe(code);
}

async function subscribed(client: TestClient): Promise<TestClient> {
  client.send({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: false });
  await client.waitFor((f) => f.type === 'subscribe_ack');
  return client;
}

describe('Origin check (cross-site WebSocket hijacking)', () => {
  it('refuses an evil Origin on HTTP with 403 and on the upgrade with 403, opening no socket', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();

    const http = await raw(t.url, 'GET', '/sessions', { headers: { origin: 'https://evil.example' } });
    expect(http.status).toBe(403);
    expectErrorShape(http.body, 'METIS_ERR_FORBIDDEN_ORIGIN');

    const post = await raw(t.url, 'POST', '/sessions', {
      headers: { origin: 'https://evil.example', 'content-type': 'application/json' },
      body: '{}',
    });
    expect(post.status).toBe(403);

    const handshake = await t.request('GET', `/sessions/${sessionId}`);
    const before = t.server.hub.connectionCount();
    const upgrade = await tryUpgrade(handshake.body.ws_url, { origin: 'https://evil.example' });
    expect(upgrade).toMatchObject({ status: 403, opened: false });
    expect(t.server.hub.connectionCount()).toBe(before);

    // The refused upgrade did not spend the token: the same token still opens a socket without Origin.
    const client = await openClient(handshake.body.ws_url);
    await subscribed(client);
    expect(t.server.hub.connectionCount()).toBe(before + 1);
  });

  it('refuses the literal origin "null" (sandboxed frames, file://)', async () => {
    const t = await startTestServer();
    const http = await raw(t.url, 'GET', '/healthz', { headers: { origin: 'null' } });
    expect(http.status).toBe(403);
  });

  it('accepts a loopback origin on HTTP and on the upgrade', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const http = await raw(t.url, 'GET', '/sessions', { headers: { origin: 'http://localhost:3000' } });
    expect(http.status).toBe(200);

    const handshake = await t.request('GET', `/sessions/${sessionId}`, undefined, {
      origin: 'http://localhost:3000',
    });
    expect(handshake.status).toBe(200);
    const client = await openClient(handshake.body.ws_url, { origin: 'http://localhost:3000' });
    await subscribed(client);
    await t.submit(sessionId, 'hello');
    await client.waitFor((f) => f.type === 'event' && f.event.type === 'turn.completed');
  });

  it('accepts an origin listed in allowedOrigins', async () => {
    const t = await startTestServer({}, { allowedOrigins: ['https://dashboard.example'] });
    const allowed = await raw(t.url, 'GET', '/healthz', { headers: { origin: 'https://dashboard.example' } });
    expect(allowed.status).toBe(200);
    const other = await raw(t.url, 'GET', '/healthz', { headers: { origin: 'https://evil.example' } });
    expect(other.status).toBe(403);
  });
});

describe('Host check (DNS rebinding)', () => {
  it('refuses a non-loopback Host with 403 on HTTP and on the upgrade', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();

    const http = await raw(t.url, 'GET', '/sessions', { headers: { host: 'evil.example' } });
    expect(http.status).toBe(403);
    expectErrorShape(http.body, 'METIS_ERR_FORBIDDEN_HOST');
    const withPort = await raw(t.url, 'GET', '/healthz', {
      headers: { host: `evil.example:${t.server.port}` },
    });
    expect(withPort.status).toBe(403);

    const handshake = await t.request('GET', `/sessions/${sessionId}`);
    const upgrade = await tryUpgrade(handshake.body.ws_url, { headers: { host: 'evil.example' } });
    expect(upgrade).toMatchObject({ status: 403, opened: false });
    expect(t.server.hub.connectionCount()).toBe(0);
  });

  it('accepts the loopback names', async () => {
    const t = await startTestServer();
    for (const host of [
      `localhost:${t.server.port}`,
      `127.0.0.1:${t.server.port}`,
      `[::1]:${t.server.port}`,
    ]) {
      const response = await raw(t.url, 'GET', '/healthz', { headers: { host } });
      expect(response.status, host).toBe(200);
    }
  });
});

describe('loopback names are matched whole, never by prefix', () => {
  // Names that start like a loopback name but resolve anywhere (nip.io maps 127.0.0.1.nip.io to
  // 127.0.0.1, so a rebinding page can use it): a prefix match would let each of them through.
  const lookalikes = [
    'localhost.evil.example',
    '127.0.0.1.nip.io',
    'localhostevil.example',
    '127.0.0.1evil.example',
    '127.0.0.1.evil.example',
  ];

  it('refuses a look-alike Host with 403', async () => {
    const t = await startTestServer();
    for (const name of lookalikes) {
      for (const host of [name, `${name}:${t.server.port}`]) {
        const response = await raw(t.url, 'GET', '/healthz', { headers: { host } });
        expect(response.status, host).toBe(403);
        expectErrorShape(response.body, 'METIS_ERR_FORBIDDEN_HOST');
      }
    }
  });

  it('refuses a look-alike Origin with 403 on HTTP and on the upgrade', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    for (const name of lookalikes) {
      for (const origin of [`http://${name}`, `https://${name}:3000`]) {
        const response = await raw(t.url, 'GET', '/healthz', { headers: { origin } });
        expect(response.status, origin).toBe(403);
        expectErrorShape(response.body, 'METIS_ERR_FORBIDDEN_ORIGIN');
      }
    }
    const handshake = await t.request('GET', `/sessions/${sessionId}`);
    const upgrade = await tryUpgrade(handshake.body.ws_url, { origin: 'http://localhost.evil.example' });
    expect(upgrade).toMatchObject({ status: 403, opened: false });
  });
});

describe('attach tokens', () => {
  it('refuses a reused token with 401', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const handshake = await t.request('GET', `/sessions/${sessionId}`);
    const first = await openClient(handshake.body.ws_url);
    await subscribed(first);
    const second = await tryUpgrade(handshake.body.ws_url);
    expect(second).toMatchObject({ status: 401, opened: false });
  });

  it('refuses a token issued for another session with 401, and burns it', async () => {
    const t = await startTestServer();
    const a = await t.createSession();
    const b = await t.createSession();
    const handshakeA = await t.request('GET', `/sessions/${a}`);
    const wsUrlB = new URL(`/sessions/${b}/stream`, handshakeA.body.ws_url);
    wsUrlB.protocol = 'ws:';
    wsUrlB.searchParams.set('attach', handshakeA.body.attach_token);
    const foreign = await tryUpgrade(wsUrlB.toString());
    expect(foreign).toMatchObject({ status: 401, opened: false });
    // A token presented for the wrong session is spent: it no longer opens its own session either.
    const own = await tryUpgrade(handshakeA.body.ws_url);
    expect(own).toMatchObject({ status: 401, opened: false });
  });

  it('refuses a missing or empty token with 401', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const base = t.url.replace(/^http/, 'ws');
    expect(await tryUpgrade(`${base}/sessions/${sessionId}/stream`)).toMatchObject({
      status: 401,
      opened: false,
    });
    expect(await tryUpgrade(`${base}/sessions/${sessionId}/stream?attach=`)).toMatchObject({
      status: 401,
      opened: false,
    });
    expect(await tryUpgrade(`${base}/sessions/${sessionId}/stream?attach=atk_madeup`)).toMatchObject({
      status: 401,
      opened: false,
    });
  });

  it('refuses an expired token with 401', async () => {
    const t = await startTestServer({}, { attachTokenTtlMs: 50 });
    const sessionId = await t.createSession();
    const handshake = await t.request('GET', `/sessions/${sessionId}`);
    await sleep(100);
    expect(await tryUpgrade(handshake.body.ws_url)).toMatchObject({ status: 401, opened: false });
    // A fresh token still works.
    const fresh = await t.request('GET', `/sessions/${sessionId}`);
    const client = await openClient(fresh.body.ws_url);
    await subscribed(client);
  });

  it('answers an upgrade on an unknown path with 404', async () => {
    const t = await startTestServer();
    const base = t.url.replace(/^http/, 'ws');
    expect(await tryUpgrade(`${base}/sessions`)).toMatchObject({ status: 404, opened: false });
  });
});

describe('request bodies', () => {
  it('refuses a POST that is not application/json with 415 and creates nothing', async () => {
    const t = await startTestServer();
    const response = await raw(t.url, 'POST', '/sessions', {
      headers: { 'content-type': 'text/plain' },
      body: '{}',
    });
    expect(response.status).toBe(415);
    expectErrorShape(response.body, 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE');
    const form = await raw(t.url, 'POST', '/sessions', {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'a=1',
    });
    expect(form.status).toBe(415);
    expect((await t.request('GET', '/sessions')).body.sessions).toEqual([]);
  });

  it('accepts application/json with a charset', async () => {
    const t = await startTestServer();
    const response = await raw(t.url, 'POST', '/sessions', {
      headers: { 'content-type': 'application/json; charset=utf-8' },
      body: JSON.stringify({ workspace_path: t.workspace }),
    });
    expect(response.status).toBe(201);
  });

  it('refuses a body over 1 MiB with 413 (declared length)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const message = 'x'.repeat(MIB + 16);
    const body = JSON.stringify({ message });
    const response = await raw(t.url, 'POST', `/sessions/${sessionId}/turns`, {
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
      body,
    });
    expect(response.status).toBe(413);
    expectErrorShape(response.body, 'METIS_ERR_BODY_TOO_LARGE');
    expect(t.runtime.currentTurn(sessionId)).toBeNull();
  });

  it('refuses a chunked body over 1 MiB with 413 (no declared length)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const body = Buffer.from(JSON.stringify({ message: 'y'.repeat(2 * MIB) }));
    const chunks: Buffer[] = [];
    for (let at = 0; at < body.length; at += 64 * 1024) chunks.push(body.subarray(at, at + 64 * 1024));
    const response = await raw(t.url, 'POST', `/sessions/${sessionId}/turns`, {
      headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      chunks,
    });
    expect(response.status).toBe(413);
    expectErrorShape(response.body, 'METIS_ERR_BODY_TOO_LARGE');
    expect(t.runtime.currentTurn(sessionId)).toBeNull();
    // The server is still fine afterwards.
    expect((await t.request('GET', '/healthz')).status).toBe(200);
  });

  it('refuses invalid JSON with 400 and the error shape', async () => {
    const t = await startTestServer();
    const response = await raw(t.url, 'POST', '/sessions', {
      headers: { 'content-type': 'application/json' },
      body: '{"workspace_path": ',
    });
    expect(response.status).toBe(400);
    expectErrorShape(response.body, 'METIS_ERR_INVALID_JSON');
    expect((await t.request('GET', '/sessions')).body.sessions).toEqual([]);
  });

  it('answers 400 (not 500) for a malformed percent-encoding in a path', async () => {
    const t = await startTestServer();
    const response = await raw(t.url, 'GET', '/sessions/%E0%A4%A');
    expect(response.status).toBe(400);
    expectErrorShape(response.body);
  });

  it('answers 400 to an upgrade with a malformed percent-encoding in the path, and keeps running', async () => {
    const t = await startTestServer();
    const base = t.url.replace(/^http/, 'ws');
    const upgrade = await tryUpgrade(`${base}/sessions/%E0%A4%A/stream?attach=atk_x`);
    expect(upgrade).toMatchObject({ status: 400, opened: false });
    expect((await t.request('GET', '/healthz')).status).toBe(200);
  });

  it('answers 400 to a request target that is not a URL, on HTTP and on the upgrade', async () => {
    const t = await startTestServer();
    const http = await rawSocket(
      t.server.port,
      'GET //[ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
    );
    expect(http).toMatch(/^HTTP\/1\.1 400 /);
    const upgrade = await rawSocket(
      t.server.port,
      'GET //[ HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
        'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    expect(upgrade).toMatch(/^HTTP\/1\.1 400 /);
    expect((await t.request('GET', '/healthz')).status).toBe(200);
  });
});

describe('CORS', () => {
  it('echoes a local origin without credentials, answers its preflight, and gives other origins nothing', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const origin = 'http://localhost:3000';
    const local = [
      await raw(t.url, 'GET', '/healthz', { headers: { origin } }),
      await raw(t.url, 'GET', '/sessions', { headers: { origin } }),
      await raw(t.url, 'GET', `/sessions/${sessionId}`, { headers: { origin } }),
      await raw(t.url, 'GET', '/sessions/nope', { headers: { origin } }),
      await raw(t.url, 'POST', '/sessions', {
        headers: { origin, 'content-type': 'application/json' },
        body: JSON.stringify({ workspace_path: t.workspace }),
      }),
      await raw(t.url, 'POST', '/sessions', { headers: { origin, 'content-type': 'text/plain' }, body: 'x' }),
      await raw(t.url, 'OPTIONS', '/sessions', {
        headers: { origin, 'access-control-request-method': 'POST' },
      }),
    ];
    expect(local.map((r) => r.status)).toEqual([200, 200, 200, 404, 201, 415, 204]);
    for (const response of local) {
      expect(response.headers['access-control-allow-origin']).toBe(origin);
      // Any local page is a loopback origin: it must bring the token itself, never ride the cookie.
      expect(response.headers['access-control-allow-credentials']).toBeUndefined();
    }
    const refused = [
      await raw(t.url, 'GET', '/healthz', { headers: { origin: 'https://evil.example' } }),
      await raw(t.url, 'OPTIONS', '/sessions', {
        headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
      }),
      await raw(t.url, 'GET', '/healthz', { headers: { host: 'evil.example' } }),
    ];
    expect(refused.map((r) => r.status)).toEqual([403, 403, 403]);
    for (const response of refused) {
      expect(response.headers['access-control-allow-origin']).toBeUndefined();
      expect(response.headers['access-control-allow-credentials']).toBeUndefined();
    }
  });
});

describe('non-loopback bind', () => {
  it('refuses to bind 0.0.0.0 without a bearer token', async () => {
    const context = tempTraceContext();
    const runtime = createRuntime({ bus: context.bus, store: context.port });
    try {
      const started = startServer(runtime, context, { host: '0.0.0.0', port: 0 });
      await expect(started).rejects.toThrow(/0\.0\.0\.0 needs a bearer token/);
      const error = await started.catch((e: unknown) => e);
      expect(isMetisError(error) && error.code).toBe('METIS_ERR_INVALID_ARGUMENT');
      expect(isMetisError(error) && error.hint).toMatch(/bearer_token|METIS_BEARER_TOKEN/);
    } finally {
      await runtime.close();
    }
  });

  it('with a bearer token, requires Authorization: Bearer on HTTP (not /healthz) and on the upgrade', async () => {
    const token = 'test-bearer-token-0123456789';
    const t = await startTestServer({}, { host: '0.0.0.0', bearerToken: token });
    const base = `http://127.0.0.1:${t.server.port}`;
    const auth = { authorization: `Bearer ${token}` };

    const missing = await raw(base, 'GET', '/sessions');
    expect(missing.status).toBe(401);
    expectErrorShape(missing.body, 'METIS_ERR_UNAUTHORIZED');
    expect((await raw(base, 'GET', '/sessions', { headers: { authorization: 'Bearer wrong' } })).status).toBe(
      401,
    );
    expect((await raw(base, 'GET', '/sessions', { headers: { authorization: token } })).status).toBe(401);
    expect((await raw(base, 'GET', '/sessions', { headers: auth })).status).toBe(200);
    // /healthz reveals nothing and stays open, for load balancers and supervisors (docs/http-api.md).
    expect((await raw(base, 'GET', '/healthz')).status).toBe(200);

    // In this mode the Host check is off (the server is meant to be reached by other names) ...
    expect(
      (await raw(base, 'GET', '/sessions', { headers: { ...auth, host: 'metis.lan:1234' } })).status,
    ).toBe(200);
    // ... but the Origin check is not.
    expect(
      (await raw(base, 'GET', '/sessions', { headers: { ...auth, origin: 'https://evil.example' } })).status,
    ).toBe(403);

    const created = await raw(base, 'POST', '/sessions', {
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ workspace_path: t.workspace }),
    });
    expect(created.status).toBe(201);
    const sessionId = created.body.session_id as string;
    const handshake = await raw(base, 'GET', `/sessions/${sessionId}`, { headers: auth });
    expect(handshake.status).toBe(200);
    const wsUrl = new URL(handshake.body.ws_url);
    wsUrl.hostname = '127.0.0.1';

    // Without the header, a forged attach token is refused ...
    const forged = new URL(wsUrl);
    forged.searchParams.set('attach', 'atk_forged');
    expect(await tryUpgrade(forged.toString())).toMatchObject({ status: 401, opened: false });
    // ... and the one an authenticated handshake issued is enough (docs/decisions.md "Local token").
    const client = await openClient(wsUrl.toString());
    await subscribed(client);
  });
});

describe('WebSocket message size cap', () => {
  it('closes a connection that sends a message over 1 MiB with 1009; another client keeps working', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const big = await subscribed(await t.attach(sessionId));
    const other = await subscribed(await t.attach(sessionId));

    big.ws.send('x'.repeat(MIB + 1));
    const closed = await big.closed;
    expect(closed.code).toBe(1009);

    const turnId = await t.submit(sessionId, 'still here');
    await other.waitFor(
      (f) => f.type === 'event' && f.event.type === 'turn.completed' && f.event.turn_id === turnId,
    );
    other.send({ type: 'ping', nonce: 'n1' });
    await other.waitFor((f) => f.type === 'pong' && f.nonce === 'n1');
  });

  it('accepts a message just under 1 MiB (answered as an ordinary invalid frame)', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const client = await subscribed(await t.attach(sessionId));
    client.send({ type: 'ping', nonce: 'z'.repeat(MIB - 100) });
    const error = await client.waitFor((f) => f.type === 'error');
    expect(error.code).toBe('invalid_frame');
    expect(error.message).toMatch(/nonce/);
    client.send({ type: 'ping', nonce: 'ok' });
    await client.waitFor((f) => f.type === 'pong' && f.nonce === 'ok');
  });
});
