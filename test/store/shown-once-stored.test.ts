import { describe, expect, it } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { subscribeOn } from '../helpers/protocol.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 35, cause 4: on a PostgreSQL store the server's clients saw a bus event once the working copy
 * held it, before PostgreSQL did, so a crash or a fence could take back what a client was shown (seen: a
 * client saw `delegate.completed`, the store holds `delegate.failed`). A bus event now reaches clients
 * once the store of record holds it, as it reaches the other nodes of a cluster.
 */

const server = postgresForFile();

describe.skipIf(!postgresTestsRun)('a server on PostgreSQL', () => {
  it('shows a client a bus event only once PostgreSQL holds it', async () => {
    const url = freshDatabase(server);
    const service = await serveOnStore(url, tempDir());
    const token = service.auth.token;
    const sessionId = (await jsonRequest(service.url, 'POST', '/sessions', {}, { token })).body
      .session_id as string;
    const handshake = await jsonRequest(service.url, 'GET', `/sessions/${sessionId}`, undefined, { token });
    const client = await openClient(handshake.body.ws_url as string, {
      headers: { authorization: `Bearer ${token}` },
    });
    await subscribeOn(client, { filter: 'preset:full', snapshot: true });
    const seen = (id: string) =>
      client.frames.some((frame) => frame.type === 'event' && frame.event.id === id);

    await server.stop();
    const event = service.trace.bus.emit({
      type: 'bus.subscriber_registered',
      session_id: sessionId,
      payload: { subscription_name: 'while-the-store-is-away', filter: {}, fast_path: false },
    })!;
    await service.trace.flush();
    // In the working copy, not in PostgreSQL: not shown.
    expect(service.trace.db.prepare('SELECT count(*) FROM events WHERE id = ?').pluck().get(event.id)).toBe(
      1,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(seen(event.id)).toBe(false);

    await server.start();
    const deadline = Date.now() + 30_000;
    while (!seen(event.id) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(seen(event.id)).toBe(true);
    client.close();
    await service.stop();
  }, 90_000);
});
