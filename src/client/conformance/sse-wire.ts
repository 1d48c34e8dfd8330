import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { WireClient } from './wire-client.js';

export interface SseSubscription {
  readonly filter: unknown;
  readonly since?: string | null;
  readonly snapshot?: boolean;
}

/**
 * The conformance suite's raw client over server-sent events (`GET /sessions/{id}/events`, docs/
 * http-api.md): the subscription goes in the query, each SSE event's data is a protocol frame, the
 * `close` event is the close (code and reason), a `cancel` frame is the HTTP cancel route. A stream
 * refused with an HTTP error reads as a `subscribe_error` frame and a close.
 */
export function openSseWire(
  baseUrl: string,
  sessionId: string,
  subscription: SseSubscription,
  token?: string,
): Promise<WireClient> {
  const params = new URLSearchParams();
  params.set(
    'filter',
    typeof subscription.filter === 'string' ? subscription.filter : JSON.stringify(subscription.filter),
  );
  if (subscription.since) params.set('since', subscription.since);
  params.set('snapshot', String(subscription.snapshot ?? false));
  const url = `${baseUrl}/sessions/${encodeURIComponent(sessionId)}/events?${params}`;
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const frames: any[] = [];
  const waiters: { predicate: (f: any) => boolean; resolve: (f: any) => void }[] = [];
  let closedResolve!: (v: { code: number; reason: string }) => void;
  const closed = new Promise<{ code: number; reason: string }>((r) => (closedResolve = r));
  let response: IncomingMessage | null = null;
  const push = (frame: any) => {
    frames.push(frame);
    for (const waiter of [...waiters]) {
      if (waiter.predicate(frame)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(frame);
      }
    }
  };
  const cancel = (frame: { turn_id?: string; reason?: string }) => {
    void fetch(`${baseUrl}/sessions/${encodeURIComponent(sessionId)}/turns/${frame.turn_id}/cancel`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify(frame.reason === undefined ? {} : { reason: frame.reason }),
    }).catch(() => undefined);
  };
  const client: WireClient = {
    frames,
    events: () => frames.filter((f) => f.type === 'event').map((f) => f.event),
    send: (frame: any) => {
      if (frame?.type === 'cancel') return cancel(frame);
      throw new Error(`SSE carries no client frames ("${frame?.type}"): a WebSocket-only check`);
    },
    waitFor: (predicate, timeoutMs = 10_000, what = 'a frame') => {
      const found = frames.find(predicate);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
          timeoutMs,
        );
        waiters.push({
          predicate,
          resolve: (f) => {
            clearTimeout(timer);
            resolve(f);
          },
        });
      });
    },
    closed,
    pause: () => response?.pause(),
    resume: () => response?.resume(),
    close: () => req.destroy(),
  };
  const send = url.startsWith('https:') ? httpsRequest : httpRequest;
  const req = send(url, { headers });
  return new Promise((resolve, reject) => {
    req.on('error', (error) => {
      if (response === null) reject(error);
      else closedResolve({ code: 1006, reason: error.message });
    });
    req.on('response', (res) => {
      response = res;
      res.setEncoding('utf8');
      let pending = '';
      let body = '';
      res.on('data', (chunk: string) => {
        if (res.statusCode !== 200) {
          body += chunk;
          return;
        }
        pending += chunk;
        for (let end = pending.indexOf('\n\n'); end >= 0; end = pending.indexOf('\n\n')) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const data = block.split('\n').find((line) => line.startsWith('data: '));
          if (data === undefined) continue; // a comment (heartbeat) or the retry field
          const frame = JSON.parse(data.slice(6));
          if (frame.type === 'close') closedResolve({ code: frame.code, reason: frame.reason });
          else push(frame);
        }
      });
      res.on('end', () => {
        if (res.statusCode !== 200) {
          const error = (JSON.parse(body || '{}') as { error?: { code?: string; message?: string } }).error;
          push({
            type: 'subscribe_error',
            code: error?.code ?? `http_${res.statusCode}`,
            message: error?.message ?? '',
          });
        }
        closedResolve({ code: 1006, reason: 'stream ended' });
      });
      resolve(client);
    });
    req.end();
  });
}
