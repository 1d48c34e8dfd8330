import type { Logger } from 'pino';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import type { Db } from '../store/database.js';
import { MirrorRows } from '../store/postgres/mirror-rows.js';
import { type StoredSession, writeStoredSession } from '../store/postgres/session-pull.js';
import { selfAndDescendants } from '../store/session-lineage.js';
import { copiedRowToEvent, EVENT_ROW_AT } from '../store/store-copy.js';
import type { EventSequencer } from '../stream/event-sequencer.js';
import type { Broker, BrokerMessage } from './broker.js';
import { FAMILY_HEADER, NODE_HEADER, sessionSubject } from './event-fanout.js';

/** This node's copy of the sessions other nodes run, kept current from NATS and filled from the store. */
export interface SessionMirror {
  /**
   * Brings a session (and its workers) up to what the store holds, releasing to this node's clients
   * what was missing; waits for the messages of the session received before it. Called before a
   * client reads a session this node does not run (an attach, a replay).
   */
  refresh(sessionId: string): Promise<void>;
  /**
   * A client of this node watches the session: its family is followed over NATS from now on (caught
   * up from the store once the broker has the subscription) until the function returned is called by
   * its last watcher.
   */
  watch(sessionId: string): () => void;
  /** Stops listening. */
  close(): void;
}

/**
 * How many sessions read here while no client of this node watched them keep their release mark: a
 * read brings its session up (and marks it) just before it reads, so an older mark is not needed.
 */
const UNWATCHED_MARKS = 1_024;
/** How long a new subscription waits for the broker's word before catching up from the store anyway. */
const SUBSCRIBED_WAIT_MS = 5_000;

/**
 * Event types written with rows of other tables (messages, tool calls, the session's own row): their
 * arrival brings the session's rows up from the store.
 */
const CHANGES_ROWS = /^(session\.|turn\.|llm\.call_(completed|failed)$|tool\.|delegate\.)/;
/**
 * Keeps this node's working copy of the sessions its own clients watch, and other nodes run, in step
 * with them, so that a client attached here is served exactly as on the node running the turn: each
 * node publishes its sessions' events in id order on their family's subject, bus events once the store
 * holds them (event-fanout.ts); a node subscribes to a family only while a client of its own watches
 * one of its sessions (`watch`), and catches up from the store once the broker has the subscription:
 * what was stored before it is read, what is stored after it comes through it. Each bus event received
 * is written into the copy (not shipped back: the store has it) and then released to this node's
 * clients, each streaming event released as it comes. A bus event that does not follow the copy's last
 * one of its session (a message lost while the broker was away, a session new here) has the session
 * brought up to the store first, which holds it already. A family's messages are handled one at a
 * time, in the order they came, apart from other families' (one's trip to the store holds up no other);
 * a refresh waits for the messages received before it. Sessions nobody here watches are not written
 * here: a read of one brings it up from the store first (`refresh`).
 */
export function mirrorSessions(parts: {
  readonly broker: Broker;
  readonly nodeId: string;
  readonly db: Db;
  readonly sequencer: EventSequencer;
  /** Reads sessions from the store: all of them, or each after the seq given (session-pull.ts). */
  readonly read: (sessionId: string, after: ReadonlyMap<string, number>) => Promise<StoredSession>;
  /** Whether this node runs the session now (then the mirror leaves it alone). */
  readonly runsHere: (sessionId: string) => boolean;
  /** The root of a session's delegation family: the subject its events travel on. */
  readonly familyOf: (sessionId: string) => string;
  /** Drops what this process holds in memory of sessions whose stored rows changed (Runtime.release). */
  readonly forget: (sessionIds: readonly string[]) => void;
  readonly logger: Logger;
}): SessionMirror {
  const { db, sequencer, logger, broker } = parts;
  const rows = new MirrorRows(db);
  /**
   * The work queued, by family root: each message and refresh of a family runs after the one before.
   * One queue per family, not per session: a planner's stream carries its workers' events, which must
   * keep their id order among its own (NATS delivers each node's messages in the order it published
   * them). Not one for all families: a trip to the store for one session (a turn's start or end brings
   * its rows) would hold every other session's deltas behind it, hundreds of milliseconds under load.
   */
  const queues = new Map<string, Promise<void>>();
  /**
   * Sessions whose messages have come in order since their family was subscribed (or the broker was
   * last reconnected): their copy is as current as the messages received, and a reader needs no trip
   * to the store. Only sessions of families followed now.
   */
  const following = new Set<string>();
  /** The families followed, by root: how many watchers each has here, and its subscription. */
  const families = new Map<string, { watchers: number; stop: () => void }>();
  /** Sessions read while not watched, oldest first, whose release marks are kept a while. */
  const unwatchedMarks = new Set<string>();
  const watched = (sessionId: string) => families.has(parts.familyOf(sessionId));
  const release = (event: MetisEvent) => {
    // A streaming event older than what this node released of its session (a trip to the store
    // released further) cannot be placed in order any more; it is dropped, as a reconnecting client's
    // deltas may be (streaming §3.6). A stored event is never dropped: it comes once, in seq order.
    const newest = sequencer.remoteMark(event.session_id);
    if (event.seq === null && newest !== undefined && event.id <= newest) return;
    sequencer.releaseRemote(event);
  };
  /** A mark of a session nobody here watches: kept for the read that follows, then let go. */
  const markUnwatched = (sessionId: string) => {
    unwatchedMarks.delete(sessionId);
    unwatchedMarks.add(sessionId);
    if (unwatchedMarks.size <= UNWATCHED_MARKS) return;
    const oldest = unwatchedMarks.values().next().value as string;
    unwatchedMarks.delete(oldest);
    if (!watched(oldest)) sequencer.forgetRemote([oldest]);
  };
  let closed = false;

  const enqueue = (
    root: string,
    sessionId: string,
    work: () => Promise<void> | void,
    after: Promise<unknown> = Promise.resolve(),
  ): Promise<void> => {
    const previous = queues.get(root) ?? Promise.resolve();
    const next = Promise.all([previous, after])
      .then(work)
      .catch((error: unknown) => {
        // The copy may now miss what this work was to bring: the next reader goes to the store.
        following.delete(sessionId);
        logger.warn({ session_id: sessionId, err: (error as Error).message }, 'could not mirror a session');
      });
    queues.set(root, next);
    // A family's queue is dropped once drained, so sessions followed once hold no memory here.
    void next.then(() => {
      if (queues.get(root) === next) queues.delete(root);
    });
    return next;
  };

  /** Of a read, the session's own events up to `seq` (a message of it showed a gap before it). */
  const ownThrough = (sessionId: string, seq: number) => (row: unknown[]) =>
    row[EVENT_ROW_AT.session] === sessionId && (row[EVENT_ROW_AT.seq] as number) <= seq;
  /** Of a read, the events before a streaming event in hand (it came before its family caught up). */
  const before = (id: string) => (row: unknown[]) => (row[EVENT_ROW_AT.id] as string) < id;

  /**
   * Brings the session and its workers up to the store, and releases what was new here. Filling a gap
   * a message showed, only the events `keep` takes (ownThrough, before) are written: the ones after the
   * message (and their streaming events, published between them) are on their way in order.
   * Returns the sessions brought up.
   */
  const bringUpNow = async (
    sessionId: string,
    keep?: (row: unknown[]) => boolean,
  ): Promise<readonly string[]> => {
    if (closed || !rows.open) return [];
    const after = new Map<string, number>();
    for (const id of selfAndDescendants(rows.lineage, sessionId)) after.set(id, rows.lastSeq(id));
    const read = await parts.read(sessionId, after);
    if (closed || !rows.open) return [];
    const stored = keep === undefined ? read : { ...read, events: read.events.filter(keep) };
    // A session followed live has its streaming events here already: only a gap may have lost some.
    const { addedEvents } = writeStoredSession(db, stored, !following.has(sessionId));
    parts.forget(stored.sessionIds.filter((id) => !parts.runsHere(id)));
    for (const row of addedEvents) release(copiedRowToEvent(row));
    // Everything the copy holds of these sessions is released: a replay may reach that far.
    for (const id of stored.sessionIds) {
      const newest = rows.newestEventId(id);
      if (newest === null || parts.runsHere(id)) continue;
      sequencer.markRemote(id, newest);
      if (!watched(id)) markUnwatched(id);
    }
    return stored.sessionIds;
  };

  /**
   * The rows of events already released, being brought from the store, by family root: one after
   * another, so an older read never overwrites a newer one's rows. Whatever else brings a family up
   * waits for them first.
   */
  const rowFetches = new Map<string, Promise<void>>();
  const bringUp = async (
    sessionId: string,
    keep?: (row: unknown[]) => boolean,
  ): Promise<readonly string[]> => {
    await rowFetches.get(parts.familyOf(sessionId));
    return bringUpNow(sessionId, keep);
  };
  /**
   * Brings the rows written with a session's event at `seq` (released already) from the store, without
   * holding up the family's messages behind the trip: a turn's start, then its deltas, would otherwise
   * reach this node's clients only once the store answered (half a second with 30 turns starting).
   */
  const fetchRows = (root: string, sessionId: string, seq: number) => {
    const next = (rowFetches.get(root) ?? Promise.resolve())
      .then(() => bringUpNow(sessionId, ownThrough(sessionId, seq)))
      .then(
        () => {},
        (error: unknown) => {
          // The copy may now miss the rows: the next reader goes to the store.
          following.delete(sessionId);
          logger.warn({ session_id: sessionId, err: (error as Error).message }, 'could not mirror a session');
        },
      );
    rowFetches.set(root, next);
    void next.then(() => {
      if (rowFetches.get(root) === next) rowFetches.delete(root);
    });
  };

  const receive = async (event: MetisEvent, family: string, root: string): Promise<void> => {
    if (closed || !rows.open || parts.runsHere(event.session_id)) return;
    // Queued before its family's last watcher left: nobody here wants it any more. (The family is the
    // subject's: a worker new here has no row yet that names its root.)
    if (!families.has(root)) return;
    if (family === 'stream') {
      // Not caught up yet (the family's subscription is new, or a gap showed): the copy may lack stored
      // events before this one, published before the broker had the subscription. The store has them
      // (a node publishes a streaming event after the stored ones before it), so they come first, in
      // id order, rather than after it.
      // Only those: the store may hold later ones already, and releasing them first would drop this
      // event (older than what was released) and the ones queued behind it.
      if (!following.has(event.session_id)) {
        await bringUp(event.session_id, before(event.id));
        following.add(event.session_id);
      }
      release(event);
      return;
    }
    const have = rows.lastSeq(event.session_id);
    if (event.seq !== null && event.seq <= have) return;
    if (event.seq === have + 1 && rows.hasSession(event.session_id)) {
      rows.insertPulled(event);
      // An event that comes with rows (a message, a turn's end, the session's own changes) brings them
      // from the store, where they were shipped with it: snapshots and reads here show them once a
      // refresh has waited for them.
      if (CHANGES_ROWS.test(event.type)) fetchRows(root, event.session_id, event.seq);
      following.add(event.session_id);
      release(event);
      return;
    }
    // Not the next one, or one with rows: the store has everything up to it (published once shipped).
    if (event.seq !== have + 1) following.delete(event.session_id);
    await bringUp(event.session_id, event.seq === null ? undefined : ownThrough(event.session_id, event.seq));
    following.add(event.session_id);
  };

  const onMessage = (root: string) => (message: BrokerMessage) => {
    if (message.header(NODE_HEADER) === parts.nodeId) return;
    let event: MetisEvent;
    try {
      event = JSON.parse(message.data) as MetisEvent;
    } catch {
      return;
    }
    if (event.session_id === SYSTEM_SESSION_ID) return;
    const family = message.header(FAMILY_HEADER) ?? 'bus';
    void enqueue(root, event.session_id, () => receive(event, family, root));
  };

  /** Brings a family up to the store; its sessions are then as current as the messages that follow. */
  const catchUp = (root: string) =>
    enqueue(root, root, async () => {
      if (!families.has(root)) return;
      for (const id of await bringUp(root)) following.add(id);
    });

  /** Stops following a family: its messages, what is known of its order, its sessions' marks. */
  const unfollow = (root: string) => {
    const family = families.get(root);
    if (family === undefined) return;
    family.stop();
    families.delete(root);
    const members = rows.open ? selfAndDescendants(rows.lineage, root) : [root];
    for (const id of members) following.delete(id);
    sequencer.forgetRemote(members.filter((id) => !parts.runsHere(id) && !unwatchedMarks.has(id)));
  };

  const follow = (root: string): boolean => {
    const subject = sessionSubject(root);
    if (subject === null) return false;
    families.set(root, { watchers: 0, stop: broker.subscribe(subject, onMessage(root)) });
    // Once the broker has the subscription, nothing stored after the read that follows can be missed.
    const subscribed = Promise.race([
      broker.flush().catch(() => {}),
      new Promise<void>((resolve) => setTimeout(resolve, SUBSCRIBED_WAIT_MS).unref()),
    ]);
    void subscribed.then(() => catchUp(root));
    return true;
  };

  // What was published while the broker was away is lost: the families clients here follow are brought
  // up at once (a turn that ended meanwhile has no next event to show the gap).
  const stopReconnect = broker.onReconnect(() => {
    following.clear();
    for (const root of families.keys()) void catchUp(root);
  });

  return {
    // A session followed in order needs only the messages already received applied first, and the
    // rows they brought. Those of every family: a worker new here has no row yet naming its root,
    // whose queue has its messages.
    refresh: (sessionId) =>
      enqueue(
        parts.familyOf(sessionId),
        sessionId,
        async () => {
          await Promise.all(rowFetches.values());
          if (!following.has(sessionId)) await bringUp(sessionId);
        },
        Promise.all(queues.values()),
      ),
    watch: (sessionId) => {
      if (closed || sessionId === SYSTEM_SESSION_ID) return () => {};
      const root = parts.familyOf(sessionId);
      if (!families.has(root) && !follow(root)) return () => {};
      families.get(root)!.watchers += 1;
      let left = false;
      return () => {
        const family = families.get(root);
        if (left || family === undefined) return;
        left = true;
        family.watchers -= 1;
        if (family.watchers === 0) unfollow(root);
      };
    },
    close: () => {
      closed = true;
      for (const root of [...families.keys()]) unfollow(root);
      stopReconnect();
    },
  };
}
