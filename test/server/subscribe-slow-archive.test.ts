import { describe, expect, it } from 'vitest';
import type { StreamArchiveRows } from '../../src/core/store/stream-archive-rows.js';
import { seeded } from '../helpers/following-client.js';
import { strictlyIncreasing, subscribeOn, sync } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';
import { recordServer } from '../helpers/server-record.js';
import { slowArchiveRows } from '../helpers/slow-reads.js';

/**
 * The stream archive's reads are asynchronous (docs/plans/store-port.md §2 I): a cursor from before
 * what memory keeps (4 finished messages a session) reads the session's deltas from the archive while
 * a turn streams new ones, and batches of them commit, leaving the archive's memory, during the read.
 * What the connection sends is still every event after the cursor once, in id order: the archive's
 * answer, its uncommitted batches as they were when the read began, and what was released to the
 * connection since. Every archive read waits up to 30 ms before it is asked and as long after, and
 * every batch reaches the store up to 30 ms late (slow-reads.ts `slowArchiveRows`).
 */
const SCRIPTED = { scripted: { token_delay_ms: 0, slow_token_delay_ms: 1, slow_tokens: 120 } };
const MAX_DELAY_MS = 30;
const MESSAGE = 'slow: tides';

describe('a subscribe by cursor whose archive reads are slow, while deltas keep flowing', () => {
  it('gets every event after the cursor once and in id order', async () => {
    const seed = Date.now() % 100_000;
    const random = seeded(seed);
    let archiveReads = 0;
    const counted = (rows: StreamArchiveRows): StreamArchiveRows => ({
      ...rows,
      after: (sessionId, afterId, limit) => {
        archiveReads += 1;
        return rows.after(sessionId, afterId, limit);
      },
    });
    const t = await startTestServer(SCRIPTED, {
      wrapArchiveRows: (rows) => counted(slowArchiveRows(rows, MAX_DELAY_MS, random)),
    });
    const record = recordServer(t);
    const sessionId = await t.createSession();
    // Enough messages that memory no longer holds the first turns' deltas.
    for (let turn = 0; turn < 6; turn += 1) await untilEnded(t, record, sessionId);
    const firstTurns = record.of(sessionId).slice(0, 60);

    for (let round = 0; round < 10; round += 1) {
      const at = `seed ${seed}, round ${round}`;
      const since: string = firstTurns[Math.floor(random() * firstTurns.length)].id;
      const readsBefore = archiveReads;
      // The turn streams while the socket is accepted and the subscribe reads: deltas released just
      // before accept are in none of the connection's buffer and some of the archive's batches in flight.
      const turnId = await t.submit(sessionId, MESSAGE);
      await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * MAX_DELAY_MS)));
      const client = await t.attach(sessionId);
      const { ack } = await subscribeOn(client, { filter: 'preset:full', since, snapshot: false });
      await record.waitFor((e) => e.type === 'turn.completed' && e.turn_id === turnId);
      await t.context.flush();
      expect(await sync(client), at).toBe(true);
      expect(archiveReads, `${at}: the replay read the archive`).toBeGreaterThan(readsBefore);

      const received = client.events();
      const expected = record.of(sessionId, ack.resolved_filter.event_types).filter((e) => e.id > since);
      expect(strictlyIncreasing(received), at).toBe(true);
      expect(received.map(idAndType), at).toEqual(expected.map(idAndType));
      expect(received, at).toEqual(expected);
      client.ws.terminate();
    }
  }, 120_000);
});

/** Submits a turn and waits for its end. */
async function untilEnded(
  t: Awaited<ReturnType<typeof startTestServer>>,
  record: ReturnType<typeof recordServer>,
  sessionId: string,
): Promise<void> {
  const turnId = await t.submit(sessionId, MESSAGE);
  await record.waitFor((e) => e.type === 'turn.completed' && e.turn_id === turnId);
}

const idAndType = (event: { id: string; type: string }) => `${event.id} ${event.type}`;
