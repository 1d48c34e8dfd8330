import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import type { AttachTokens } from '../../../http/attach-tokens.js';
import type { AuthGate } from '../../../http/auth-gate.js';
import { checkRequest, type SecurityOptions } from '../../../http/security.js';
import { ClientConnection, type ConnectionDeps } from '../../client-connection.js';
import { WebSocketTransport } from './websocket-transport.js';

const MAX_PAYLOAD = 1024 * 1024;
const STREAM_PATH = /^\/sessions\/([^/]+)\/stream$/;

export interface WebSocketDoorOptions {
  readonly security: SecurityOptions;
  readonly gate: AuthGate;
  readonly tokens: AttachTokens;
  readonly connectionDeps: () => ConnectionDeps;
}

export interface WebSocketDoor {
  /** Waits up to `graceMs` for the close handshakes begun, then cuts every socket still open. */
  close(graceMs: number): Promise<void>;
}

/**
 * `GET /sessions/{id}/stream` upgraded to a WebSocket (streaming §3.1): the front door's checks, the
 * attach token, then one `ClientConnection` per socket. The upgrade never reaches Fastify's router.
 */
export function openWebSocketDoor(server: Server, options: WebSocketDoorOptions): WebSocketDoor {
  // No permessage-deflate: connections write pre-encoded frames straight to the socket
  // (stream/event-frames.ts), which is only safe while the `ws` sender never holds a frame back.
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PAYLOAD, perMessageDeflate: false });

  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const refuse = (status: number, message: string, extra = '') => {
      socket.end(`HTTP/1.1 ${status} ${message}\r\n${extra}Connection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    const verdict = checkRequest(request, options.security);
    if (!verdict.ok) return refuse(verdict.status, 'Forbidden');
    const sessionId = streamSessionId(request.url);
    if (sessionId === undefined) return refuse(400, 'Bad Request');
    if (sessionId === null) return refuse(404, 'Not Found');
    const attachToken = new URL(request.url ?? '/', 'http://localhost').searchParams.get('attach');
    const attached = options.tokens.consume(attachToken, sessionId);
    const auth = options.gate.checkUpgrade(request, attached);
    if (!auth.ok) {
      const retry = 'retryAfterSeconds' in auth ? `Retry-After: ${auth.retryAfterSeconds}\r\n` : '';
      return refuse(auth.status, auth.status === 429 ? 'Too Many Requests' : 'Unauthorized', retry);
    }
    // Authenticated by header, but the stream still needs its attach token (streaming §3.1).
    if (!attached) return refuse(401, 'Unauthorized');
    wss.handleUpgrade(request, socket, head, (ws) => {
      // The connection tells the server it opened (ConnectionDeps.opened) and closed.
      new ClientConnection(new WebSocketTransport(ws, socket), sessionId, options.connectionDeps());
    });
  });

  return {
    async close(graceMs) {
      await closeHandshakes(wss.clients, graceMs);
      for (const client of wss.clients) client.terminate();
      wss.close();
    },
  };
}

/** The session a stream URL names; null when the path is not a stream's, undefined when unreadable. */
function streamSessionId(rawUrl: string | undefined): string | null | undefined {
  let url: URL;
  try {
    url = new URL(rawUrl ?? '/', 'http://localhost');
  } catch {
    return undefined;
  }
  const match = STREAM_PATH.exec(url.pathname);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]!);
  } catch {
    return undefined;
  }
}

/** Resolves when every socket has closed (its close handshake done) or after `graceMs`. */
function closeHandshakes(clients: ReadonlySet<WebSocket>, graceMs: number): Promise<void> {
  const open = [...clients].filter((client) => client.readyState !== client.CLOSED);
  if (open.length === 0) return Promise.resolve();
  return new Promise<void>((resolve) => {
    let left = open.length;
    const timer = setTimeout(resolve, graceMs);
    for (const client of open) {
      client.once('close', () => {
        left -= 1;
        if (left === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
    }
  });
}
