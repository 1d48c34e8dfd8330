import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { HttpAgent } from '@ag-ui/client';
import { describe, expect, it } from 'vitest';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { subscribe, waitForType } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 34, observation 6: the smaller ways a request got an answer the document does not promise (a
 * 500, a reset instead of a 413, a 400 for a long id, an unstated rule) or saw what it should not (raw
 * control characters in a confirmation summary, the internal `system` session over SSE).
 */

const TOKEN = 'small-ways-in-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };

interface RawAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
}

/** One request with node:http (which sends any method its parser knows, QUERY included). */
function send(
  base: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: string } = {},
): Promise<RawAnswer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      { host: url.hostname, port: url.port, method, path, headers: options.headers, agent: false },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, text }));
      },
    );
    request.setTimeout(5_000, () => request.destroy(new Error(`no answer to ${method} ${path} in 5 s`)));
    request.on('error', reject);
    request.end(options.body);
  });
}

/**
 * POSTs `totalBytes` over a raw TCP socket, chunked (or with its Content-Length), and reads only once the
 * whole body is sent, as many clients do (Python's requests, which schema fuzzers run on). Resolves with
 * the answer; rejects when the connection fails first (the reset of a server that stopped reading).
 */
function sendOversizedBody(
  base: string,
  path: string,
  totalBytes: number,
  framing: 'chunked' | 'content-length',
): Promise<RawAnswer> {
  const url = new URL(base);
  const chunked = framing === 'chunked';
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    let received = Buffer.alloc(0);
    socket.on('error', (error) =>
      reject(new Error(`${error.message} after ${received.length} bytes of answer`)),
    );
    socket.on('close', () => reject(new Error(`closed after ${received.length} bytes of answer`)));
    const readAnswer = () =>
      socket.on('data', (data: Buffer) => {
        received = Buffer.concat([received, data]);
        const answer = parseAnswer(received);
        if (answer === null) return;
        socket.destroy();
        resolve(answer);
      });
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: ${AUTH.authorization}\r\n` +
        `Content-Type: application/json\r\n${chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${totalBytes}`}\r\n\r\n`,
    );
    const chunk = Buffer.alloc(64 * 1024, 'a');
    const framed = chunked
      ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')])
      : chunk;
    let sent = 0;
    const sendMore = () => {
      while (!socket.destroyed) {
        if (sent >= totalBytes) return void socket.write(chunked ? '0\r\n\r\n' : '', readAnswer);
        sent += chunk.length;
        if (!socket.write(framed)) return void socket.once('drain', sendMore);
      }
    };
    sendMore();
  });
}

/** An HTTP/1.1 answer with a Content-Length, once all of it is in `received`; null before. */
function parseAnswer(received: Buffer): RawAnswer | null {
  const end = received.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const [statusLine, ...lines] = received.subarray(0, end).toString('latin1').split('\r\n');
  const headers: IncomingHttpHeaders = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = received.subarray(end + 4);
  if (body.length < Number(headers['content-length'])) return null;
  return { status: Number(statusLine!.split(' ')[1]), headers, text: body.toString('utf8') };
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

describe('issue 34 observation 6: the smaller items', () => {
  it('a QUERY request (no body) is a 405 with Allow, or a 404, and logs no error', async () => {
    const logs = captureLogs();
    const t = await startTestServer({}, { logger: logs.logger, bearerToken: TOKEN });

    const onSessions = await send(t.url, 'QUERY', '/sessions', { headers: AUTH });
    expect(onSessions.status).toBe(405);
    expect(onSessions.headers.allow).toBe('GET, POST');
    expect(JSON.parse(onSessions.text).error.code).toBe('METIS_ERR_METHOD_NOT_ALLOWED');

    const onSession = await send(t.url, 'QUERY', '/sessions/sess_nope/messages', { headers: AUTH });
    expect(onSession.status).toBe(405);
    expect(onSession.headers.allow).toBe('GET');

    const nowhere = await send(t.url, 'QUERY', '/no/such/path', { headers: AUTH });
    expect(nowhere.status).toBe(404);
    expect(JSON.parse(nowhere.text).error.code).toBe('METIS_ERR_NOT_FOUND');

    // With a JSON body too: the method is still not served.
    const withBody = await send(t.url, 'QUERY', '/sessions', {
      headers: { ...AUTH, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(withBody.status).toBe(405);

    await settleLogs();
    expect(logs.at(LEVEL.error)).toEqual([]);
  });

  it('an oversized body is answered 413, read by a client that sends it all first (20 of 20 chunked)', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const tooLarge = {
      error: { code: 'METIS_ERR_BODY_TOO_LARGE', message: 'request body exceeds 1 MiB' },
    };
    // 8 MiB: more than the socket buffers of both ends hold, so the client is still sending when the
    // server answers (with 2 MiB the buffers took it all and hid the reset on this machine).
    for (let attempt = 0; attempt < 20; attempt++) {
      const answer = await sendOversizedBody(t.url, '/sessions', 8 * 1024 * 1024, 'chunked');
      expect(answer.status).toBe(413);
      expect(JSON.parse(answer.text)).toEqual(tooLarge);
    }
    // Refused by its Content-Length before a byte of it was read: the same.
    for (let attempt = 0; attempt < 5; attempt++) {
      const answer = await sendOversizedBody(t.url, '/sessions', 8 * 1024 * 1024, 'content-length');
      expect(answer.status).toBe(413);
      expect(JSON.parse(answer.text)).toEqual(tooLarge);
    }
    // The server still serves afterwards.
    expect((await send(t.url, 'GET', '/sessions', { headers: AUTH })).status).toBe(200);
  });

  it('command_summary carries no raw control characters; the input that runs is untouched', async () => {
    const t = await startTestServer({
      tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
    });
    const command = 'echo safe\r\u001b[2Khidden\u009b1A\u0007\ntrue';
    const sessionId = await t.createSession();
    const watcher = await subscribe(t, sessionId, { snapshot: false });
    await t.submit(sessionId, `run: ${command}`);
    await waitForType(watcher.client, 'tool.confirmation_requested');

    // As every client gets it: the live frame, the stored trace, the pending listing, the snapshot.
    const live = watcher.client.events().find((e) => e.type === 'tool.confirmation_requested')!;
    const trace = await t.request('GET', `/sessions/${sessionId}/trace`);
    const stored = trace.body.events.find((e: any) => e.type === 'tool.confirmation_requested');
    const listing = await t.request('GET', `/sessions/${sessionId}/confirmations`);
    const [pending] = listing.body.confirmations;
    for (const summary of [
      live.payload.command_summary,
      stored.payload.command_summary,
      pending.command_summary,
    ]) {
      expect(summary).not.toMatch(CONTROL);
      // Each control character is shown, not dropped: the reader sees that the command has them.
      expect(summary).toBe('echo safe\u240d\u241b[2Khidden\\u009b1A\u2407\u240atrue');
    }
    expect(live.payload.input_summary).not.toMatch(CONTROL);
    // What runs, and what its hash covers, is the command as the model wrote it.
    expect(pending.input).toEqual({ command });
  });

  it('a path id over 512 characters is a 404, as an unknown id of normal length, not a 400', async () => {
    const t = await startTestServer();
    const long = 'a'.repeat(600);

    const read = await t.request('GET', `/sessions/${long}`);
    expect(read.status).toBe(404);
    expect(read.body.error.code).toBe('METIS_ERR_NOT_FOUND');
    const turn = await t.request('POST', `/sessions/${long}/turns`, { message: 'hi' });
    expect(turn.status).toBe(404);
    expect(turn.body.error.code).toBe('METIS_ERR_NOT_FOUND');
    const answer = await t.request('POST', `/sessions/${long}/confirmations/${long}`, { decision: 'allow' });
    expect(answer.status).toBe(404);
    // A method the path's routes do not serve stays a 405, as for a short id.
    const wrongMethod = await t.request('PUT', `/sessions/${long}/turns`, {});
    expect(wrongMethod.status).toBe(405);
    expect((await t.request('PUT', '/sessions/sess_x/turns', {})).status).toBe(405);
  });

  it('POST /ag-ui with messages: [] is a run that reports the thread (no turn); /openapi.json states the rule', async () => {
    const t = await startTestServer();
    const doc = await t.request('GET', '/openapi.json');
    const messages =
      doc.body.paths['/ag-ui'].post.requestBody.content['application/json'].schema.properties.messages;
    expect(messages.type).toBe('array');
    expect(messages.minItems ?? 0).toBe(0);
    expect(messages.description).toContain('last message');

    // A new thread: a run with nothing to do, which the real client's verifier accepts.
    const fresh = new HttpAgent({ url: `${t.url}/ag-ui`, threadId: 'thread-empty' });
    const types: string[] = [];
    const snapshots: unknown[][] = [];
    await fresh.runAgent(
      { runId: 'run-empty' },
      {
        onEvent: ({ event }: { event: { type: string } }) => {
          types.push(event.type);
        },
        onMessagesSnapshotEvent: ({ event }: { event: { messages: unknown[] } }) => {
          snapshots.push(event.messages);
        },
      },
    );
    expect(types).toEqual(['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'RUN_FINISHED']);
    expect(snapshots).toEqual([[]]);
    // Nothing was created for it.
    expect(t.runtime.hasSession('thread-empty')).toBe(false);

    // A thread with a conversation: the snapshot is the thread as stored, and no turn starts.
    const talk = new HttpAgent({ url: `${t.url}/ag-ui`, threadId: 'thread-talk' });
    talk.addMessage({ id: 'u1', role: 'user', content: 'hello' });
    await talk.runAgent({ runId: 'run-1' });
    const turnsBefore = t.runtime.getSession('thread-talk').turn_count;
    const resumed = new HttpAgent({ url: `${t.url}/ag-ui`, threadId: 'thread-talk' });
    const resumedSnapshots: any[][] = [];
    await resumed.runAgent(
      { runId: 'run-2' },
      {
        onMessagesSnapshotEvent: ({ event }: { event: { messages: any[] } }) => {
          resumedSnapshots.push(event.messages);
        },
      },
    );
    expect(resumedSnapshots).toHaveLength(1);
    expect(resumedSnapshots[0]!.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(t.runtime.getSession('thread-talk').turn_count).toBe(turnsBefore);

    // A last message that is not the user's is still refused, as the schema says.
    const refused = await t.request('POST', '/ag-ui', {
      threadId: 'thread-talk',
      runId: 'r',
      messages: [{ id: 'a', role: 'assistant', content: 'hi' }],
    });
    expect(refused.status).toBe(400);
  });

  it('the internal system session is a 404 on the SSE stream (with and without snapshot) and every other way in', async () => {
    const t = await startTestServer();
    for (const query of ['', '?snapshot=false', '?snapshot=true', '?filter=preset:full&snapshot=false']) {
      const response = await fetch(`${t.url}/sessions/system/events${query}`, {
        signal: AbortSignal.timeout(5_000),
      });
      const text = await response.text();
      expect({ query, status: response.status }).toEqual({ query, status: 404 });
      expect(response.headers.get('content-type')).toContain('application/json');
      expect(JSON.parse(text).error.code).toBe('METIS_ERR_SESSION_NOT_FOUND');
    }
    // The WebSocket handshake (no attach token without it), AG-UI and the AI SDK chat.
    expect((await t.request('GET', '/sessions/system')).status).toBe(404);
    const run = { threadId: 'system', runId: 'r', messages: [] };
    expect((await t.request('POST', '/ag-ui', run)).status).toBe(404);
    expect((await t.request('POST', '/sessions/system/ag-ui', run)).status).toBe(404);
    const asked = { ...run, messages: [{ id: 'm', role: 'user', content: 'hi' }] };
    expect((await t.request('POST', '/ag-ui', asked)).status).toBe(404);
    const chat = {
      id: 'system',
      messages: [{ id: 'm', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
    };
    expect((await t.request('POST', '/api/chat', chat)).status).toBe(404);
  });
});
