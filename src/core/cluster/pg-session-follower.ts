import type { Logger } from 'pino';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import type { FollowReads } from '../store/follow-reads.js';
import type { EventSequencer } from '../stream/event-sequencer.js';
import type { Broker, BrokerMessage } from './broker.js';
import { FAMILY_HEADER, NODE_HEADER, sessionSubject } from './event-fanout.js';
import type { SessionMirror } from './session-mirror.js';
import { storedAfter, storedThrough } from './stored-pages.js';

/**
 * How many sessions read here while no client of this node watched them keep their mark: a read
 * marks its session just before it reads (`refresh`), so an older mark is not needed.
 */
const UNWATCHED_MARKS = 1_024;
/** How long a new subscription waits for the broker's word before catching up from the store anyway. */
const SUBSCRIBED_WAIT_MS = 5_000;

/** A message as received: the event, and whether it is stored (`bus`) or live only (`stream`). */
interface Received {
  readonly event: MetisEvent;
  readonly stored: boolean;
}

/** A family of sessions followed here, by its root: one subscription, one queue of work. */
interface Family {
  readonly root: string;
  watchers: number;
  stop: () => void;
  /** The sessions of the family marked here: forgotten with the family. */
  readonly members: Set<string>;
  /**
   * Whether the family was caught up once: a session of it without a mark here is new since (a worker
   * started meanwhile), and its events are released from its first.
   */
  known: boolean;
  /**
   * Messages received while a catch-up is on its way (the subscription is new, or the broker came
   * back): the catch-up places them among the stored events it reads, by id. Null otherwise.
   */
  pending: Received[] | null;
}

/**
 * Follows the sessions this node's clients watch, and other nodes run, straight from PostgreSQL with
 * no working copy: every read a client makes is answered by the store (pg-stream-reads.ts), so all a
 * follower does is release each watched session's events to this node's clients through the sequencer
 * (`releaseRemote`), in order, once, with no gap, and keep the marks a snapshot or a replay reads up to.
 *
 * Each node publishes its sessions' events in id order on their family's subject (event-fanout.ts), bus
 * events once the store holds them, streaming events live. A family is subscribed only while a client
 * here watches one of its sessions (`watch`); once the broker has the subscription it is caught up from
 * the store, the messages received meanwhile placed among the stored events by id. A bus event whose
 * seq does not follow the last one released has the missing ones read from the store first (it holds
 * them: a node publishes once it stored); one seen already is dropped. A streaming event older than what
 * was released of its session is dropped, as a reconnecting client's deltas may be (streaming §3.6).
 * A broker that comes back has each followed family caught up again (what was published meanwhile is
 * lost). A family's work runs one job at a time, in the order it came, apart from other families'.
 * What is held per session (its last seq here) is held while its family is watched, or for the last
 * UNWATCHED_MARKS sessions read unwatched; the sequencer's marks go with it.
 */
export function followSessions(parts: {
  readonly broker: Broker;
  readonly nodeId: string;
  readonly sequencer: EventSequencer;
  readonly reads: FollowReads;
  /** Whether this node runs the session now (then its events are this node's own). */
  readonly runsHere: (sessionId: string) => boolean;
  /** The root of a session's delegation family: the subject its events travel on. */
  readonly familyOf: (sessionId: string) => string;
  /** Drops what this process holds in memory of sessions whose stored events came from elsewhere. */
  readonly forget?: (sessionIds: readonly string[]) => void;
  readonly logger: Logger;
}): SessionMirror {
  const { broker, sequencer, reads, logger } = parts;
  const families = new Map<string, Family>();
  /** The work queued, by family root: each job of a family runs after the one before. */
  const queues = new Map<string, Promise<void>>();
  /** Per session marked here, the seq of the newest stored event released (or marked) here. */
  const seqs = new Map<string, number>();
  /** Sessions marked by a read while no client here watched them, oldest first. */
  const unwatched = new Set<string>();
  let closed = false;

  /**
   * The followed family a session belongs to, if any: by its root, or by the family it was seen in (a
   * worker new here, whose root `familyOf` may not know yet, came on its root's subject).
   */
  const familyWatching = (sessionId: string): Family | undefined => {
    const byRoot = families.get(parts.familyOf(sessionId));
    if (byRoot !== undefined) return byRoot;
    for (const family of families.values()) if (family.members.has(sessionId)) return family;
    return undefined;
  };

  /** Lets go of what is held of sessions: their seq here and the sequencer's mark. */
  const forgetMarks = (sessionIds: Iterable<string>) => {
    const gone = [...sessionIds].filter((id) => !parts.runsHere(id));
    for (const id of gone) seqs.delete(id);
    sequencer.forgetRemote(gone);
  };

  /** A mark of a session nobody here watches: kept for the read that follows, then let go. */
  const markedUnwatched = (sessionId: string) => {
    unwatched.delete(sessionId);
    unwatched.add(sessionId);
    if (unwatched.size <= UNWATCHED_MARKS) return;
    const oldest = unwatched.values().next().value as string;
    unwatched.delete(oldest);
    if (familyWatching(oldest) === undefined) forgetMarks([oldest]);
  };

  /** A session of a watched family: its mark is the family's from now on. */
  const joinFamily = (family: Family, sessionId: string) => {
    family.members.add(sessionId);
    unwatched.delete(sessionId);
  };

  /** Releases a stored event unless one at or past its seq was; never drops one for its id. */
  const releaseStored = (event: MetisEvent) => {
    const sessionId = event.session_id;
    if (parts.runsHere(sessionId)) return;
    const have = seqs.get(sessionId);
    if (have !== undefined && event.seq! <= have) return;
    seqs.set(sessionId, event.seq!);
    sequencer.releaseRemote(event);
    parts.forget?.([sessionId]);
  };

  const releaseStreaming = (event: MetisEvent) => {
    const newest = sequencer.remoteMark(event.session_id);
    if (newest !== undefined && event.id <= newest) return;
    sequencer.releaseRemote(event);
  };

  /** Where a session stands in the store, taken as released: nobody here was shown what came before. */
  const markAtNewest = async (sessionIds: readonly string[], wanted: () => boolean = () => true) => {
    const newest = await reads.newest(sessionIds);
    // Its family's last watcher left meanwhile: a mark set now would never be let go.
    if (!wanted()) return;
    for (const [sessionId, mark] of newest) {
      if (parts.runsHere(sessionId)) continue;
      if ((seqs.get(sessionId) ?? 0) < mark.seq) seqs.set(sessionId, mark.seq);
      sequencer.markRemote(sessionId, mark.id);
    }
  };

  const enqueue = (root: string, work: () => Promise<void>): Promise<void> => {
    const next = (queues.get(root) ?? Promise.resolve()).then(work);
    const settled = next.catch((error: unknown) => {
      logger.warn({ family: root, err: (error as Error).message }, 'could not follow a session family');
    });
    queues.set(root, settled);
    // A family's queue is dropped once drained, so families followed once hold no memory here.
    void settled.then(() => {
      if (queues.get(root) === settled) queues.delete(root);
    });
    return next;
  };

  /** Whether the family is still followed: work queued before its last watcher left does nothing. */
  const followed = (family: Family) => !closed && families.get(family.root) === family;

  /**
   * Of a followed family's sessions, those without a mark here marked at the store's newest event (the
   * first time the family is caught up: nobody here was shown what came before) or taken from their
   * first (once it is known: a worker new since), and the stored events after the others' marks.
   */
  const storedSince = async (family: Family, sessionIds: Iterable<string>): Promise<MetisEvent[]> => {
    const after = new Map<string, number>();
    const unmarked: string[] = [];
    for (const id of sessionIds) {
      if (parts.runsHere(id)) continue;
      joinFamily(family, id);
      const have = seqs.get(id) ?? (family.known ? 0 : undefined);
      if (have === undefined) unmarked.push(id);
      else after.set(id, have);
    }
    await markAtNewest(unmarked, () => followed(family));
    return storedAfter(reads, after);
  };

  /** One message of a followed family, in the order received. */
  const receive = async (family: Family, { event, stored }: Received): Promise<void> => {
    const sessionId = event.session_id;
    if (!followed(family) || parts.runsHere(sessionId)) return;
    joinFamily(family, sessionId);
    if (!stored) {
      releaseStreaming(event);
      return;
    }
    // Undefined: never caught up (the store was away), so followed from this event on.
    const have = seqs.get(sessionId) ?? (family.known ? 0 : undefined);
    if (have !== undefined && event.seq! > have + 1)
      for (const missed of await storedThrough(reads, sessionId, have, event.seq! - 1)) releaseStored(missed);
    releaseStored(event);
  };

  /**
   * Brings a followed family up to the store: what it stored since each session's mark is released,
   * the messages received meanwhile placed among those events by id (a streaming event after the stored
   * ones before it, not dropped behind later ones).
   */
  const catchUp = async (root: string, family: Family) => {
    // A catch-up queued behind another finds the messages since the first one's end in the queue.
    family.pending ??= [];
    try {
      if (!followed(family)) return;
      const members = new Set([...(await reads.lineage(root)), ...family.members]);
      const stored = await storedSince(family, members);
      family.known = true;
      if (!followed(family)) return;
      let next = 0;
      for (let message = family.pending.shift(); message !== undefined; message = family.pending.shift()) {
        while (next < stored.length && stored[next]!.id <= message.event.id) releaseStored(stored[next++]!);
        await receive(family, message);
      }
      for (; next < stored.length; next += 1) releaseStored(stored[next]!);
    } finally {
      // Received while the above waited on the store: after everything it read.
      while (family.pending !== null && family.pending.length > 0) {
        const message = family.pending.shift()!;
        await receive(family, message).catch((error: unknown) => {
          logger.warn({ family: root, err: (error as Error).message }, 'could not follow a session');
        });
      }
      family.pending = null;
    }
  };

  const onMessage = (root: string, family: Family) => (message: BrokerMessage) => {
    if (message.header(NODE_HEADER) === parts.nodeId) return;
    let event: MetisEvent;
    try {
      event = JSON.parse(message.data) as MetisEvent;
    } catch {
      return;
    }
    if (event.session_id === SYSTEM_SESSION_ID) return;
    const received = {
      event,
      stored: (message.header(FAMILY_HEADER) ?? 'bus') === 'bus' && event.seq !== null,
    };
    if (family.pending !== null) family.pending.push(received);
    else void enqueue(root, () => receive(family, received));
  };

  /** Catches the family up once the broker has every subscription made so far. */
  const catchUpWhenSubscribed = (root: string, family: Family) => {
    family.pending ??= [];
    const subscribed = Promise.race([
      broker.flush().catch(() => {}),
      new Promise<void>((resolve) => setTimeout(resolve, SUBSCRIBED_WAIT_MS).unref()),
    ]);
    // Queued now, so that the family's messages and reads wait for it.
    return enqueue(root, async () => {
      await subscribed;
      await catchUp(root, family);
    });
  };

  const follow = (root: string): Family | null => {
    const subject = sessionSubject(root);
    if (subject === null) return null;
    const family: Family = {
      root,
      watchers: 0,
      stop: () => {},
      members: new Set(),
      known: false,
      pending: [],
    };
    family.stop = broker.subscribe(subject, onMessage(root, family));
    families.set(root, family);
    void catchUpWhenSubscribed(root, family);
    return family;
  };

  const unfollow = (root: string) => {
    const family = families.get(root);
    if (family === undefined) return;
    family.stop();
    families.delete(root);
    forgetMarks(family.members);
  };

  // What was published while the broker was away is lost: each followed family is caught up again.
  const stopReconnect = broker.onReconnect(() => {
    for (const [root, family] of families) void catchUpWhenSubscribed(root, family);
  });

  /**
   * Brings a session and its workers up to what the store holds now: in a followed family, released
   * (the events its messages will bring, in flight still, come here first); otherwise marked.
   */
  const refreshNow = async (sessionId: string) => {
    const sessionIds = (await reads.lineage(sessionId)).filter((id) => !parts.runsHere(id));
    const family = familyWatching(sessionId);
    if (family === undefined) {
      await markAtNewest(sessionIds);
      for (const id of sessionIds) if (familyWatching(id) === undefined) markedUnwatched(id);
      return;
    }
    const stored = await storedSince(family, sessionIds);
    if (!followed(family)) return;
    for (const event of stored) releaseStored(event);
  };

  return {
    refresh: (sessionId) => {
      if (closed || sessionId === SYSTEM_SESSION_ID) return Promise.resolve();
      // On the queue of the family whose messages bring the session, after those received before.
      return enqueue(familyWatching(sessionId)?.root ?? parts.familyOf(sessionId), () =>
        refreshNow(sessionId),
      );
    },
    watch: (sessionId) => {
      if (closed || sessionId === SYSTEM_SESSION_ID) return () => {};
      const root = parts.familyOf(sessionId);
      const family = families.get(root) ?? follow(root);
      if (family === null) return () => {};
      family.watchers += 1;
      let left = false;
      return () => {
        if (left || families.get(root) !== family) return;
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
