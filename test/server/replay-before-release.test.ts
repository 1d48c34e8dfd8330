import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { StoreUpstream } from '../../src/core/store/store-upstream.js';
import { strictlyIncreasing, subscribe, waitForEvents } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * A store of record that holds each local commit `delayMs` after it: as PostgreSQL behind a working
 * copy does, events are readable from the copy before they are released to clients.
 */
function lateUpstream(delayMs: number): StoreUpstream {
  const shipped = new Set<(through: string) => void>();
  let timer: NodeJS.Timeout | null = null;
  return {
    label: 'late upstream (test)',
    failure: null,
    backlog: 0,
    shippedAtUs: null,
    whenShipped: async () => true,
    start: () => {},
    kick: () => {
      // Everything committed up to when the shipment runs goes in it, as a shipper's batch does.
      timer ??= setTimeout(() => {
        timer = null;
        for (const listener of shipped) listener('evt_~');
      }, delayMs);
    },
    close: async () => {
      if (timer !== null) clearTimeout(timer);
    },
    onShipped: (listener) => {
      shipped.add(listener);
      return () => shipped.delete(listener);
    },
    onFenced: () => () => {},
  };
}

describe('a replay while committed events wait for their release', () => {
  it('a cursor subscribe on a restarted server sends each event once, in id order', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const first = await startTestServer({}, { trace: { dbPath } });
    const sessionId = await first.createSession();
    const { client } = await subscribe(first, sessionId);
    const turnId = await first.submit(sessionId, 'hello');
    await waitForEvents(client, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    const since = client.events().at(-1)!.id as string;
    client.close();
    await first.server.close();
    await first.runtime.close();
    first.context.close();

    // Nothing is released yet by this process when the client comes back: what it committed and holds
    // for release must arrive once, live, not also in the replay.
    const again = await startTestServer({}, { trace: { dbPath, upstream: () => lateUpstream(300) } });
    const next = await again.submit(sessionId, 'hello again');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const back = await subscribe(again, sessionId, { since, snapshot: false });
    const fresh = await subscribe(again, sessionId);
    await waitForEvents(back.client, (e) => e.type === 'turn.completed' && e.turn_id === next);
    // Past the release of what was held: anything sent twice has arrived by now.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const ids = back.client.events().map((e) => e.id as string);
    expect(ids.length - new Set(ids).size, `ids shown twice: ${ids.join(' ')}`).toBe(0);
    expect(strictlyIncreasing(back.client.events())).toBe(true);
    // A snapshot taken then stands before what waits: the turn follows it, each event once.
    expect(fresh.snapshot.snapshot_at_event_id).toBe(since);
    const after = fresh.client.events().map((e) => e.id as string);
    expect(after).toEqual(ids);
  });
});
