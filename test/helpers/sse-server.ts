import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';

export const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'provider-streams');

/** One scripted answer of the replay server; requests get them in order. */
export interface ReplayResponse {
  /** A recording in test/fixtures/provider-streams, replayed one SSE event at a time. */
  readonly fixture?: string;
  /** A whole JSON body instead (an HTTP error). */
  readonly json?: unknown;
  /** Default 200. */
  readonly status?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Send this many events, then keep the connection open without writing (for aborts). */
  readonly hangAfter?: number;
  /** Send this many events, then destroy the socket (a dropped connection). */
  readonly dropAfter?: number;
  /** Pause before each event; default 1 ms, so the client reads a real stream. */
  readonly eventDelayMs?: number;
}

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: Record<string, any>;
  readonly receivedAt: number;
}

/** How the response to one request ended. */
export type ResponseOutcome = 'completed' | 'client_closed' | 'dropped';

export interface ReplayServer {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** How the n-th response ended; resolves when it has. */
  outcome(n: number): Promise<ResponseOutcome>;
  close(): Promise<void>;
}

/** The events of a recording: blocks separated by a blank line, each sent with its blank line. */
export function sseEvents(fixture: string): string[] {
  return readFileSync(join(FIXTURES, fixture), 'utf8')
    .split(/\r?\n\r?\n/)
    .map((block) => block.trim())
    .filter((block) => block !== '' && !block.startsWith('#'))
    .map((block) => `${block}\n\n`);
}

/**
 * A local HTTP server on port 0 that replays recorded provider SSE streams (the real SDKs are pointed
 * at it through their base URL). It records every request and how each response ended — in
 * particular whether the client closed the connection before the stream was over.
 */
export async function startReplayServer(responses: readonly ReplayResponse[]): Promise<ReplayServer> {
  const requests: RecordedRequest[] = [];
  const outcomes: Promise<ResponseOutcome>[] = [];
  const settlers: ((outcome: ResponseOutcome) => void)[] = [];
  for (let i = 0; i < responses.length; i += 1) {
    outcomes.push(new Promise((resolve) => settlers.push(resolve)));
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const n = requests.length;
      const text = Buffer.concat(chunks).toString('utf8');
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: text ? (JSON.parse(text) as Record<string, any>) : {},
        receivedAt: Date.now(),
      });
      const response = responses[n];
      if (!response) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { type: 'api_error', message: `no recorded response #${n}` } }));
        return;
      }
      void serve(response, res, settlers[n]!);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  onTestFinished(close);
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    outcome: (n) => outcomes[n] ?? Promise.reject(new Error(`no response #${n}`)),
    close,
  };
}

async function serve(
  response: ReplayResponse,
  res: ServerResponse,
  settle: (outcome: ResponseOutcome) => void,
): Promise<void> {
  let dropped = false;
  res.on('close', () => settle(dropped ? 'dropped' : res.writableFinished ? 'completed' : 'client_closed'));
  const status = response.status ?? 200;
  if (response.json !== undefined) {
    res.writeHead(status, { 'content-type': 'application/json', ...response.headers });
    res.end(JSON.stringify(response.json));
    return;
  }
  res.writeHead(status, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...response.headers,
  });
  const events = sseEvents(response.fixture ?? '');
  const delay = response.eventDelayMs ?? 1;
  for (let i = 0; i < events.length; i += 1) {
    if (response.hangAfter !== undefined && i >= response.hangAfter) return; // stays open
    await new Promise((resolve) => setTimeout(resolve, delay));
    if (res.destroyed) return;
    if (response.dropAfter !== undefined && i >= response.dropAfter) {
      dropped = true;
      res.socket?.destroy();
      return;
    }
    // Wait until the event is handed to the socket, so a drop after it does not swallow it.
    await new Promise<void>((resolve) => res.write(events[i], () => resolve()));
  }
  if (response.hangAfter !== undefined && response.hangAfter >= events.length) return;
  res.end();
}
