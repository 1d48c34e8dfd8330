import type { EventBus } from '../bus/event-bus.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import { eventJson } from '../events/event-json.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import { shippedCommits } from '../store/shipped-commits.js';
import type { StoreUpstream } from '../store/store-upstream.js';
import type { StoreWriter } from '../store/store-writer.js';
import { EventSequencer } from '../stream/event-sequencer.js';
import type { Broker } from './broker.js';

/** The prefix of every subject metis publishes on. */
export const SUBJECT_PREFIX = 'metis';

/** Header saying which family a message carries: `bus` (stored, after commit) or `stream` (live only). */
export const FAMILY_HEADER = 'Metis-Family';
/** Header naming the node that ran the turn. */
export const NODE_HEADER = 'Metis-Node';

/** A session id is one subject token: no dots, wildcards or spaces (metis's own ids never have them). */
const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+$/;

/**
 * The one subject a session family's events go on (a root session's id: its workers' events travel
 * with its own), both families, in the order this node delivers them.
 */
export function sessionSubject(sessionId: string): string | null {
  return SUBJECT_TOKEN.test(sessionId) ? `${SUBJECT_PREFIX}.session.${sessionId}` : null;
}

/** How long the events committed before the fan-out started wait for PostgreSQL before given up on. */
const EARLIER_SHIPMENT_WAIT_MS = 30_000;

/**
 * Publishes what this node delivers to its own clients to NATS, in the same id order (DESIGN.md
 * invariant 1): streaming events live, bus events once the store of record holds them (invariant 2
 * for a cluster: a client on another node never sees an event that a crash of this node could take
 * back). Each message is the event's JSON envelope, byte for byte the `event` of a stream frame, sealed
 * under the cluster's key on its way (sealed-broker.ts). The
 * `system` session is each node's own (the store numbers it at shipment), so it is not published.
 * Returns the function that stops it.
 */
export function fanOutEvents(parts: {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  /**
   * The shipper of a node whose writer commits to a working copy: a bus event is published once it is
   * shipped. Null when the writer commits to PostgreSQL itself: its commit is the store of record's.
   */
  readonly upstream: StoreUpstream | null;
  readonly streaming: StreamingChannel;
  readonly broker: Broker;
  readonly nodeId: string;
  /**
   * Events this node committed before it joined that no other node saw: the turns a restart within
   * the node timeout closed (crash recovery). Published once PostgreSQL holds them; a node that missed
   * them would otherwise show those turns running until a later event of the session.
   */
  readonly earlier?: readonly MetisEvent[];
  /**
   * Whether this node runs the session now, as far as it knows without asking the store. A streaming
   * event of a session it may have lost (a frozen node thawed: its leases are not trusted until asked
   * again) is not published: the other nodes would show a turn another node has since closed.
   */
  readonly runsHere?: (sessionId: string) => boolean;
  /**
   * The root of a session's delegation family (default: itself). A family's events share its root's
   * subject, so a node following a planner's clients gets its workers' events in their id order among
   * the planner's with one subscription.
   */
  readonly familyOf?: (sessionId: string) => string;
}): () => void {
  const { broker, nodeId } = parts;
  const familyOf = parts.familyOf ?? ((sessionId: string) => sessionId);
  const publish = (event: MetisEvent) => {
    if (event.session_id === SYSTEM_SESSION_ID) return;
    const subject = sessionSubject(familyOf(event.session_id));
    if (subject === null) return;
    broker.publish(subject, eventJson(event), {
      [FAMILY_HEADER]: event.seq === null ? 'stream' : 'bus',
      [NODE_HEADER]: nodeId,
    });
  };
  const { upstream, writer } = parts;
  const commits = upstream === null ? writer : shippedCommits(writer, upstream);
  const order = new EventSequencer(parts.bus, commits, parts.streaming);
  const runsHere = parts.runsHere ?? (() => true);
  // Bus events need no such check: the commit (or shipment) that releases them is fenced by the leases.
  const stop = order.onRelease((event) => {
    if (event.seq === null && !runsHere(event.session_id)) return;
    publish(event);
  });
  let stopped = false;
  const earlier = parts.earlier ?? [];
  if (earlier.length > 0)
    // Still not in PostgreSQL after the wait (it is away): not published, and the other nodes find the
    // gap by seq at the session's next event, as they find any.
    void inStore(earlier, writer, upstream).then((stored) => {
      if (stored && !stopped) for (const event of earlier) publish(event);
    });
  return () => {
    stopped = true;
    stop();
    order.close();
  };
}

/** Whether PostgreSQL holds `events` within the wait: shipped there, or committed there by the writer. */
function inStore(
  events: readonly MetisEvent[],
  writer: StoreWriter,
  upstream: StoreUpstream | null,
): Promise<boolean> {
  if (upstream !== null) return upstream.whenShipped(EARLIER_SHIPMENT_WAIT_MS);
  const newest = events.reduce((a, b) => (b.id > a.id ? b : a));
  return writer.whenCommitted(newest.id, EARLIER_SHIPMENT_WAIT_MS).then(
    () => true,
    () => false,
  );
}
