import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import type { Broker, BrokerMessage } from '../../src/core/cluster/broker.js';
import { FAMILY_HEADER, NODE_HEADER, sessionSubject } from '../../src/core/cluster/event-fanout.js';
import { mirrorSessions } from '../../src/core/cluster/session-mirror.js';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { newEventId } from '../../src/core/events/ids.js';
import type { StreamingChannel } from '../../src/core/runtime/streaming-channel.js';
import { openDatabase } from '../../src/core/store/database.js';
import type { StoredSession } from '../../src/core/store/postgres/session-pull.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { EventSequencer } from '../../src/core/stream/event-sequencer.js';

/**
 * A following node's mirror (session-mirror.ts) with its store read and broker stubbed at their seams,
 * over a real SQLite working copy and a real sequencer: a session whose trip to the store does not come
 * back holds up only its own family, never another session's live events. Under load (30 turns at
 * once, cluster bench) one queue for every family held each node's deltas behind every turn's start
 * and end being read from PostgreSQL: p99 of 1 s on other nodes against 40 ms on the owner.
 */

const homes: string[] = [];
afterEach(() => {
  for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
});

function delta(sessionId: string): MetisEvent {
  return {
    id: newEventId(),
    timestamp: microsToIso(nowMicros()),
    session_id: sessionId,
    turn_id: 'turn_mirror',
    parent_event_id: null,
    type: 'text.delta',
    actor: 'agent',
    payload: { index: 0, text: 'hi' },
    sensitivity: 'private',
    seq: null,
  };
}

/** A turn's start, stored with the user's message (a row of another table). */
function turnStarted(sessionId: string, seq: number): MetisEvent {
  return { ...delta(sessionId), type: 'turn.started', actor: 'user', payload: {}, seq };
}

/** An event as the store's copied `events` rows hold it (store-copy.ts). */
function storedRow(event: MetisEvent): unknown[] {
  return [
    event.session_id,
    event.id,
    event.seq,
    nowMicros(),
    event.turn_id,
    event.parent_event_id,
    event.type,
    event.actor,
    event.sensitivity,
    JSON.stringify(event.payload),
  ];
}

function rig(
  read: (sessionId: string) => Promise<StoredSession>,
  /** When the broker has a new subscription (the catch-up from the store waits for it). */
  flush: () => Promise<void> = async () => {},
) {
  const home = mkdtempSync(join(tmpdir(), 'metis-mirror-'));
  homes.push(home);
  const db = openDatabase(join(home, 'copy.db'), { create: true });
  // The working copy's own tables (working-copy.ts) that a mirror writes.
  db.exec(`CREATE TABLE IF NOT EXISTS pg_pulled_events (id TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS pg_pulling (since_us INTEGER NOT NULL);`);
  const sequencer = new EventSequencer(
    { onEmit: () => () => {} } as unknown as EventBus,
    { onCommit: () => () => {}, onDrop: () => () => {} } as unknown as StoreWriter,
    { subscribe: () => () => {} } as unknown as StreamingChannel,
  );
  const released: MetisEvent[] = [];
  sequencer.onRelease((event) => released.push(event));
  const handlers = new Map<string, (message: BrokerMessage) => void>();
  const broker = {
    subscribe: (subject: string, handler: (message: BrokerMessage) => void) => {
      handlers.set(subject, handler);
      return () => handlers.delete(subject);
    },
    flush,
    onReconnect: () => () => {},
  } as unknown as Broker;
  const mirror = mirrorSessions({
    broker,
    nodeId: 'node-b',
    db,
    sequencer,
    read: (sessionId) => read(sessionId),
    runsHere: () => false,
    familyOf: (sessionId) => sessionId,
    forget: () => {},
    logger: pino({ level: 'silent' }),
  });
  /** An event of the session as node A publishes it. */
  const publish = (event: MetisEvent) => {
    const family = event.seq === null ? 'stream' : 'bus';
    const headers: Record<string, string> = { [FAMILY_HEADER]: family, [NODE_HEADER]: 'node-a' };
    handlers.get(sessionSubject(event.session_id)!)!({
      subject: sessionSubject(event.session_id)!,
      data: JSON.stringify(event),
      header: (name) => headers[name],
    });
  };
  return {
    db,
    mirror,
    publish,
    released,
    close: () => {
      mirror.close();
      db.close();
    },
  };
}

const nothingStored: StoredSession = { sessionIds: [], rows: new Map(), events: [] };

describe('a following node mirrors each session family apart', () => {
  it("releases one session's live events while another's read from the store has not come back", async () => {
    const stalled = 'sess_stalled';
    const flowing = 'sess_flowing';
    const stall: { release?: () => void } = {};
    const { mirror, publish, released, close } = rig((sessionId) =>
      sessionId === stalled && stall.release === undefined
        ? new Promise((resolve) => {
            stall.release = () => resolve(nothingStored);
          })
        : Promise.resolve(nothingStored),
    );
    try {
      const leaveStalled = mirror.watch(stalled);
      const leaveFlowing = mirror.watch(flowing);
      // Each family's catch-up from the store is queued once the broker has its subscription.
      await new Promise((resolve) => setTimeout(resolve, 0));
      publish(delta(stalled));
      publish(delta(flowing));
      const deadline = Date.now() + 2_000;
      while (released.length === 0 && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(released.map((event) => event.session_id)).toEqual([flowing]);
      // The stalled family keeps its own order: its delta comes once its catch-up is done.
      stall.release?.();
      await mirror.refresh(stalled);
      expect(released.map((event) => event.session_id)).toEqual([flowing, stalled]);
      leaveStalled();
      leaveFlowing();
    } finally {
      close();
    }
  });

  it("releases a turn's start and its deltas before the start's rows come from the store", async () => {
    const session = 'sess_known';
    const rowsRead: { release?: () => void } = {};
    let reads = 0;
    const { db, mirror, publish, released, close } = rig(() => {
      reads += 1;
      // The first read is the catch-up as the client attaches; the next brings the turn's rows.
      return reads === 1
        ? Promise.resolve(nothingStored)
        : new Promise((resolve) => {
            rowsRead.release = () => resolve(nothingStored);
          });
    });
    try {
      db.prepare('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)').run(session);
      const leave = mirror.watch(session);
      await new Promise((resolve) => setTimeout(resolve, 0));
      const started = turnStarted(session, 1);
      const first = delta(session);
      publish(started);
      publish(first);
      const deadline = Date.now() + 2_000;
      while (released.length < 2 && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(released.map((event) => event.id)).toEqual([started.id, first.id]);
      expect(reads).toBe(2);
      // A reader here (an attach, a replay) still waits for the rows.
      let refreshed = false;
      const refreshing = mirror.refresh(session).then(() => {
        refreshed = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(refreshed).toBe(false);
      rowsRead.release?.();
      await refreshing;
      expect(refreshed).toBe(true);
      leave();
    } finally {
      close();
    }
  });
  it('releases a delta that came before the catch-up after the stored events it follows, in id order', async () => {
    const session = 'sess_joined';
    // Stored and published just before this node's subscription reached the broker: not received.
    const started = { ...delta(session), type: 'llm.call_started', seq: 1 };
    // The next delta comes through the new subscription before the broker said it has it.
    const next = delta(session);
    // Stored after it (the store is read later) and published after it: on its way in order.
    const ended = { ...delta(session), type: 'llm.call_completed', seq: 2 };
    const subscribed: { done?: () => void } = {};
    const { db, mirror, publish, released, close } = rig(
      async () => ({
        sessionIds: [session],
        rows: new Map(),
        events: [storedRow(started), storedRow(ended)],
      }),
      () =>
        new Promise<void>((resolve) => {
          subscribed.done = resolve;
        }),
    );
    try {
      db.prepare('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)').run(session);
      const leave = mirror.watch(session);
      publish(next);
      publish(ended);
      subscribed.done?.();
      await mirror.refresh(session);
      expect(released.map((event) => event.type)).toEqual([
        'llm.call_started',
        'text.delta',
        'llm.call_completed',
      ]);
      expect(released.map((event) => event.id)).toEqual([started.id, next.id, ended.id]);
      leave();
    } finally {
      close();
    }
  });
});
