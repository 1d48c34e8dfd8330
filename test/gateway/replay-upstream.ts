import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sseEvents } from '../helpers/sse-server.js';

export interface Upstream {
  readonly url: string;
  /** Every request, in order: path, JSON body, and the client's port (one per connection). */
  readonly requests: { path: string; body: any; port: number | undefined }[];
  close(): Promise<void>;
}

/**
 * A fake provider replaying recordings of test/fixtures/provider-streams (sse-server.ts's format), one
 * per request in order, that lives as long as the file's tests (sse-server.ts closes with each test).
 */
export async function startUpstream(fixtures: readonly string[]): Promise<Upstream> {
  const requests: Upstream['requests'] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk) => {
      text += String(chunk);
    });
    req.on('end', async () => {
      const fixture = fixtures[requests.length];
      requests.push({ path: req.url ?? '', body: text ? JSON.parse(text) : {}, port: req.socket.remotePort });
      if (fixture === undefined) {
        res.writeHead(500, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ error: { type: 'api_error', message: 'no recording left' } }));
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      for (const event of sseEvents(fixture)) {
        await new Promise((resolve) => setTimeout(resolve, 1));
        res.write(event);
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
