import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NatsServer, natsTestsRun, startNats } from '../helpers/nats.js';

/** The NATS test server itself (test/helpers/nats.ts), checked with a raw socket: no client library yet. */

let nats: NatsServer;
beforeAll(async () => {
  if (natsTestsRun) nats = await startNats();
}, 60_000);
afterAll(async () => {
  await nats?.destroy();
});

/** The server's greeting (NATS sends `INFO {json}\r\n` first), or the connect error's code. */
function greeting(port: number): Promise<{ info: Record<string, unknown> } | { refused: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.setTimeout(5_000, () => {
      socket.destroy();
      reject(new Error(`no INFO line within 5 s (got ${JSON.stringify(received)})`));
    });
    socket.on('data', (chunk) => {
      received += chunk.toString('utf8');
      const end = received.indexOf('\r\n');
      if (end === -1) return;
      socket.destroy();
      const line = received.slice(0, end);
      if (!line.startsWith('INFO ')) reject(new Error(`expected INFO, got ${JSON.stringify(line)}`));
      else resolve({ info: JSON.parse(line.slice('INFO '.length)) });
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve({ refused: error.code ?? error.message }));
  });
}

describe.skipIf(!natsTestsRun)('NATS test server', () => {
  it('answers INFO on its port, refuses once stopped, and comes back on the same port', async () => {
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
    const first = await greeting(nats.port);
    expect(first).toMatchObject({ info: { port: nats.port, headers: true } });
    // The server leaves `jetstream` out of INFO when it is off.
    expect('info' in first && (first.info.jetstream ?? false)).toBe(false);

    await nats.stop();
    expect(await greeting(nats.port)).toEqual({ refused: 'ECONNREFUSED' });

    await nats.start();
    expect(await greeting(nats.port)).toMatchObject({ info: { port: nats.port } });
  });
});
