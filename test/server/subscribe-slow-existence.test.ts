import { describe, expect, it } from 'vitest';
import { seeded } from '../helpers/following-client.js';
import {
  dropAfterEvents,
  type FilterInput,
  lastEventId,
  strictlyIncreasing,
  subscribeOn,
  sync,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient, type TestServer } from '../helpers/server.js';
import { recordServer } from '../helpers/server-record.js';
import { slowReads, slowSessionReads } from '../helpers/slow-reads.js';

/**
 * The subscribe's first reads are asynchronous (docs/plans/store-port.md step 4, non-owner reads):
 * whether the session exists (asked of the store for a session this process does not hold) and its
 * delegation tree (`StreamReads.lineage`). A turn that starts while they wait releases events the
 * connection must still send once, in id order, whether it asked for a snapshot or resumes from a
 * cursor: the seam between what the store answered and what was released meanwhile has no gap and no
 * duplicate. Every read here waits up to 30 ms, a new delay per read (a store over the network).
 */
const SCRIPTED = { scripted: { token_delay_ms: 0, slow_token_delay_ms: 1, slow_tokens: 40 } };
const MAX_DELAY_MS = 30;

const WITH_WORKERS: FilterInput = { event_types: null, actors: null, include_worker_sessions: true };

describe('a subscribe whose existence and lineage reads are slow, while a turn starts', () => {
  it.each([
    { what: 'its own events', message: 'slow: tides', filter: 'preset:full' as FilterInput },
    // The lineage read names the workers; one is made while the subscribe's reads wait.
    { what: "its and its workers' events", message: 'delegate: count the shells', filter: WITH_WORKERS },
  ])(
    'gets $what once and in id order, by snapshot then by cursor',
    async ({ message, filter }) => {
      const seed = Date.now() % 100_000;
      const random = seeded(seed);
      const t = await startTestServer(SCRIPTED, {
        wrapStreamReads: (reads) => slowReads(reads, MAX_DELAY_MS, random),
        wrapSessionReads: (reads) => slowSessionReads(reads, MAX_DELAY_MS, random),
      });
      const record = recordServer(t);
      const sessionId = await t.createSession();
      for (let round = 0; round < 6; round += 1) {
        const at = `seed ${seed}, round ${round}`;
        // A snapshot subscribe to a session this process does not hold: a turn starts during its reads.
        const first = await attachNotHeld(t, sessionId);
        dropAfterEvents(first, 5 + Math.floor(random() * 40));
        const firstSubscribed = subscribeOn(first, { filter, snapshot: true });
        const firstTurn = await submitAfter(t, sessionId, message, random);
        const { snapshot, ack } = await firstSubscribed;
        const from: string = snapshot.snapshot_at_event_id;
        await record.waitFor((e) => e.type === 'turn.completed' && e.turn_id === firstTurn);
        // Dropped mid-turn, or (a short turn) left once it has had everything.
        if (await sync(first)) first.ws.terminate();
        await first.closed;

        // A cursor resume, the session not held again: the next turn starts during its reads.
        const second = await attachNotHeld(t, sessionId);
        const since = lastEventId(first) ?? from;
        const secondSubscribed = subscribeOn(second, { filter, since, snapshot: false });
        const secondTurn = await submitAfter(t, sessionId, message, random);
        await secondSubscribed;
        await record.waitFor((e) => e.type === 'turn.completed' && e.turn_id === secondTurn);
        await t.context.flush();
        expect(await sync(second), at).toBe(true);

        for (const client of [first, second]) expect(strictlyIncreasing(client.events()), at).toBe(true);
        const received = [...first.events(), ...second.events()];
        const carried = [
          sessionId,
          ...(ack.resolved_filter.include_worker_sessions ? workersOf(t, sessionId) : []),
        ];
        const expected = carried
          .flatMap((id) => record.of(id, ack.resolved_filter.event_types))
          .filter((e) => e.id > from)
          .sort((a, b) => (a.id < b.id ? -1 : 1));
        expect(received.map(idAndType), at).toEqual(expected.map(idAndType));
        // A worker's events are there to get: the second turn's at least (each turn delegates anew).
        const sessions = new Set(expected.map((e) => e.session_id)).size;
        expect(sessions > 1, at).toBe(filter === WITH_WORKERS);
        expect(received, at).toEqual(expected);
        second.ws.terminate();
      }
    },
    120_000,
  );
});

/** A WebSocket on the session, with the session then dropped from this process's memory. */
async function attachNotHeld(t: TestServer, sessionId: string): Promise<TestClient> {
  const client = await t.attach(sessionId);
  // The handshake took the session up: let it go, so that the subscribe asks the store whether it exists.
  expect(t.runtime.release(sessionId)).toBe(true);
  return client;
}

/** Submits a turn after a random pause of up to the reads' delay: it lands somewhere in the subscribe. */
async function submitAfter(t: TestServer, sessionId: string, message: string, random: () => number) {
  await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * MAX_DELAY_MS)));
  return t.submit(sessionId, message);
}

/** The sessions a session delegated to, and theirs. */
function workersOf(t: TestServer, sessionId: string): string[] {
  return t.runtime.sessions.childSessionIds(sessionId).flatMap((id) => [id, ...workersOf(t, id)]);
}

const idAndType = (event: { id: string; type: string }) => `${event.id} ${event.type}`;
