import { describe, expect, it, onTestFinished } from 'vitest';
import type { Broker } from '../../src/core/cluster/broker.js';
import { FAMILY_HEADER, NODE_HEADER, sessionSubject } from '../../src/core/cluster/event-fanout.js';
import { followSessions } from '../../src/core/cluster/pg-session-follower.js';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { eventJson } from '../../src/core/events/event-json.js';
import { newEventId, newId } from '../../src/core/events/ids.js';
import { silentLogger } from '../../src/core/logger.js';
import { StreamingChannel } from '../../src/core/runtime/streaming-channel.js';
import type { FollowReads } from '../../src/core/store/follow-reads.js';
import { pgFollowReads } from '../../src/core/store/postgres/pg-follow-reads.js';
import { EventSequencer } from '../../src/core/stream/event-sequencer.js';
import { nodeBroker, until } from '../helpers/cluster.js';
import { turnStarted } from '../helpers/events.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session } from '../helpers/row-change-builders.js';

/**
 * A cluster node on PostgreSQL alone follows the sessions its clients watch with no working copy
 * (pg-session-follower.ts): another node's events, stored in PostgreSQL by a PgStoreWriter and
 * published on their family's subject as event-fanout.ts does, reach this node's clients through its
 * EventSequencer in order, once each, with what NATS lost read from PostgreSQL. Real nats-server,
 * PostgreSQL and sequencer.
 */

const pg = postgresForFile();
const ROOT = 'sess_root';
const WORKER = 'sess_worker';
/** A worker the owner starts once this node follows the family. */
const NEW_WORKER = 'sess_new_worker';

/**
 * Read answers held until `open` is called (a store slow to answer a catch-up), or the next one failed
 * (a store gone for a moment).
 */
function heldReads(reads: FollowReads) {
  let gate: Promise<void> | null = null;
  let opened = () => {};
  let waiting = 0;
  let failing = false;
  const held =
    <A extends unknown[], R>(read: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      if (failing) {
        failing = false;
        throw new Error('the store is away');
      }
      if (gate !== null) {
        waiting += 1;
        await gate;
      }
      return read(...args);
    };
  return {
    reads: {
      eventsAfter: held(reads.eventsAfter),
      newest: held(reads.newest),
      lineage: held(reads.lineage),
    } satisfies FollowReads,
    hold: () => {
      gate = new Promise((resolve) => (opened = resolve));
    },
    get waiting() {
      return waiting;
    },
    get failing() {
      return failing;
    },
    failNext: () => {
      failing = true;
    },
    open: () => {
      gate = null;
      opened();
    },
  };
}

/** `workerRootKnown`: whether this node can tell WORKER's root (false: a worker new here, no row yet). */
async function rig(workerRootKnown = true) {
  const nats = await startNats();
  onTestFinished(() => nats.destroy());
  // The node running the sessions: its writer stores, and the test publishes as its fan-out does.
  const owner = await openPgWriter(pg);
  const publisher = await nodeBroker(nats.url);
  // This node: its own bus, writer and sequencer, which releases to its clients.
  const here = await openPgWriter(pg, { url: owner.url });
  const sequencer = new EventSequencer(here.bus, here.writer, new StreamingChannel());
  onTestFinished(() => sequencer.close());
  const released: MetisEvent[] = [];
  sequencer.onRelease((event) => released.push(event));
  const broker: Broker = await nodeBroker(nats.url);
  const reads = heldReads(pgFollowReads(owner.pool));
  const familyOf = (sessionId: string) =>
    sessionId === WORKER || sessionId === NEW_WORKER ? ROOT : sessionId;
  const follower = followSessions({
    broker,
    nodeId: 'node-b',
    sequencer,
    reads: reads.reads,
    runsHere: () => false,
    familyOf: workerRootKnown ? familyOf : (sessionId) => sessionId,
    logger: silentLogger(),
  });
  onTestFinished(() => follower.close());
  owner.writer.writeRow({ what: 'session', change: session(ROOT, 1) });
  owner.writer.writeRow({ what: 'session', change: session(WORKER, 2, ROOT) });

  /** Stores `count` events of a session as the owner runs it; published only when asked. */
  const store = async (count: number, sessionId = ROOT): Promise<MetisEvent[]> => {
    const events: MetisEvent[] = [];
    for (let i = 0; i < count; i += 1)
      events.push(owner.bus.emit(turnStarted(sessionId, null, newId('turn')))!);
    await owner.flush();
    return events;
  };
  const publish = (...events: MetisEvent[]) => {
    for (const event of events)
      publisher.publish(sessionSubject(familyOf(event.session_id))!, eventJson(event), {
        [FAMILY_HEADER]: event.seq === null ? 'stream' : 'bus',
        [NODE_HEADER]: 'node-a',
      });
  };
  /** A live event of a session, after every event created so far. */
  const delta = (sessionId = ROOT): MetisEvent => ({
    id: newEventId(),
    timestamp: microsToIso(nowMicros()),
    session_id: sessionId,
    turn_id: 'turn_1',
    parent_event_id: null,
    type: 'text.delta',
    actor: 'agent',
    payload: { text: 'hi' },
    sensitivity: 'private',
    seq: null,
  });
  const ids = (events: readonly MetisEvent[]) => events.map((event) => event.id);
  /** Waits until this node's clients got `expected`, then until a later beacon shows nothing else came. */
  const releasedAre = async (expected: readonly MetisEvent[], sessionId = ROOT) => {
    const beacon = delta(sessionId);
    await until(() => released.length >= expected.length, 'the events to be released');
    publish(beacon);
    await until(() => released.some((event) => event.id === beacon.id), 'the beacon to be released');
    expect(ids(released)).toEqual([...ids(expected), beacon.id]);
    released.length = 0;
  };
  return { nats, owner, sequencer, released, follower, reads, store, publish, delta, ids, releasedAre };
}

describe.runIf(postgresTestsRun && natsTestsRun)('a node following watched sessions from PostgreSQL', () => {
  it('releases in order, once each, filling what NATS lost from PostgreSQL', async () => {
    const r = await rig();
    const history = await r.store(3);
    // A client reads the session (its snapshot reaches the store's newest), then watches it.
    await r.follower.refresh(ROOT);
    expect(r.sequencer.remoteMark(ROOT)).toBe(history.at(-1)!.id);
    expect(r.released).toEqual([]);
    // Stored and published before the broker has the subscription: lost, and read from PostgreSQL.
    const early = await r.store(2);
    r.publish(...early);
    r.follower.watch(ROOT);
    await r.follower.refresh(ROOT);
    await r.releasedAre(early);

    const stale = r.delta();
    const [a, b, c, d] = await r.store(4);
    // b lost on the way; a and c come twice; a delta older than what was released comes last.
    r.publish(a!, a!, c!, a!, c!, d!, stale);
    await r.releasedAre([a!, b!, c!, d!]);
    // The mark a snapshot reads up to is past them all (at the beacon).
    expect(r.sequencer.remoteMark(ROOT)! > d!.id).toBe(true);
  }, 60_000);

  it('places streaming events received during the catch-up after the stored events before them', async () => {
    const r = await rig();
    await r.store(1);
    await r.follower.refresh(ROOT);
    const lost = await r.store(1);
    r.reads.hold();
    r.follower.watch(ROOT);
    // The broker has the subscription once the catch-up asks the store (held).
    await until(() => r.reads.waiting > 0, 'the catch-up to read');
    const live = r.delta();
    const [after] = await r.store(1);
    r.publish(live, after!);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(r.released).toEqual([]);
    r.reads.open();
    await r.releasedAre([lost[0]!, live, after!]);
  }, 60_000);

  it('brings what the store holds before a refresh resolves, and catches up after a broker outage', async () => {
    const r = await rig();
    await r.follower.refresh(ROOT);
    r.follower.watch(ROOT);
    await r.follower.refresh(ROOT);
    // Stored, its message still on the way: a refresh releases it, and the message is then a duplicate.
    const [inFlight] = await r.store(1);
    await r.follower.refresh(ROOT);
    expect(r.ids(r.released)).toEqual([inFlight!.id]);
    r.publish(inFlight!);
    await r.releasedAre([inFlight!]);

    await r.nats.stop();
    // Published while the broker was away: lost, and no later event shows the gap.
    const meanwhile = await r.store(2);
    await r.nats.start();
    await r.releasedAre(meanwhile);
  }, 60_000);

  it('carries a worker’s events on its root’s subject, and forgets its marks on the last unwatch', async () => {
    const r = await rig();
    await r.store(1, WORKER);
    await r.follower.refresh(ROOT);
    // Stored before the broker has the subscription: the catch-up reads the whole family.
    const lost = await r.store(1, WORKER);
    const unwatchFirst = r.follower.watch(ROOT);
    const unwatchSecond = r.follower.watch(ROOT);
    await r.releasedAre(lost, WORKER);
    const [w1, w2] = await r.store(2, WORKER);
    const [p1] = await r.store(1);
    r.publish(w2!, p1!);
    // w1 was lost: filled before w2, and all in id order.
    await r.releasedAre([w1!, w2!, p1!], WORKER);

    unwatchFirst();
    expect(r.sequencer.remoteMark(WORKER)).toBeDefined();
    unwatchSecond();
    expect(r.sequencer.remoteMark(WORKER)).toBeUndefined();
    expect(r.sequencer.remoteMark(ROOT)).toBeUndefined();
    // No longer followed: nothing more is released here.
    const [later] = await r.store(1);
    r.publish(later!, r.delta());
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.released).toEqual([]);
  }, 60_000);

  it('brings a worker whose root this node cannot tell yet with the family it came in', async () => {
    const r = await rig(false);
    await r.follower.refresh(ROOT);
    r.follower.watch(ROOT);
    await r.follower.refresh(ROOT);
    // Stored, its message on the way on the root's subject: a read of the worker releases it there.
    const [inFlight] = await r.store(1, WORKER);
    await r.follower.refresh(WORKER);
    expect(r.ids(r.released)).toEqual([inFlight!.id]);
    r.publish(inFlight!);
    await r.releasedAre([inFlight!], WORKER);
  }, 60_000);

  it('releases a worker started after the catch-up from its first event, the lost ones read', async () => {
    const r = await rig();
    await r.follower.refresh(ROOT);
    r.follower.watch(ROOT);
    await r.follower.refresh(ROOT);
    r.owner.writer.writeRow({ what: 'session', change: session(NEW_WORKER, 3, ROOT) });
    const [first, second] = await r.store(2, NEW_WORKER);
    r.publish(second!);
    await r.releasedAre([first!, second!], NEW_WORKER);
  }, 60_000);

  it('logs a store read that fails and lets the next message bring the session up', async () => {
    const r = await rig();
    await r.follower.refresh(ROOT);
    r.follower.watch(ROOT);
    await r.follower.refresh(ROOT);
    const [first, second] = await r.store(2);
    r.reads.failNext();
    // Its gap cannot be read now: nothing is released, and nothing is thrown at the process.
    r.publish(second!);
    await until(() => !r.reads.failing, 'the read to fail');
    const [third] = await r.store(1);
    r.publish(third!);
    await r.releasedAre([first!, second!, third!]);
  }, 60_000);
});
