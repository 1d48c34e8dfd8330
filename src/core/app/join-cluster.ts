import type { Logger } from 'pino';
import type { JoinedNode, PreparedCluster } from '../cluster/cluster-start.js';
import { mirrorSessions } from '../cluster/session-mirror.js';
import {
  type DurableTurns,
  resumeTakenTurns,
  type TakeOverReport,
  takeOverSession,
} from '../cluster/take-over.js';
import type { MetisEvent } from '../events/envelope.js';
import type { Runtime } from '../runtime/runtime.js';
import type { StoredSession } from '../store/postgres/session-pull.js';
import { useRowIdBlock } from '../store/row-ids.js';
import { selfAndDescendants } from '../store/session-lineage.js';
import type { SessionRows } from '../store/store-port.js';
import type { TraceContext } from '../store/trace-context.js';
import type { EventSequencer } from '../stream/event-sequencer.js';
import { closeStreamsOfOtherNodes, letFamiliesGo } from './cluster-losses.js';
import type { ClusterSeat } from './cluster-seat.js';
import type { MetisServer } from './metis-server.js';

export interface ClusterParts {
  readonly prepared: PreparedCluster;
  readonly seat: ClusterSeat;
  readonly server: MetisServer;
  readonly trace: TraceContext;
  readonly runtime: Runtime;
  readonly sessions: SessionRows;
  readonly token: string | null;
  /** What this start's crash recovery committed, for the other nodes' clients. */
  readonly recovered: readonly MetisEvent[];
  readonly pricingVersion: string;
  readonly logger: Logger;
}

/**
 * The cluster stage of the start, once the server listens: joins the node (its server's URL, its
 * sequencer, its in-process HTTP app) and wires what the cluster tells it back into the runtime and
 * the streams: sessions lost to another node, the broker lost, a session taken over.
 */
export async function joinCluster(parts: ClusterParts): Promise<JoinedNode> {
  const { seat, server, trace, runtime, sessions, logger } = parts;
  const upstream = trace.upstream;
  if (upstream === null) throw new Error('a cluster node runs on a PostgreSQL store');
  const runsHere = (sessionId: string) => seat.runsHere(sessionId);
  // As the fan-out publishes: a streaming event of a session this node may have lost is nobody's.
  server.hub.sequencer.admitStreaming((event) => runsHere(event.session_id));
  let lastLag = { backlog: 0, shippedAtUs: null as number | null };
  const node = await parts.prepared.join({
    url: server.url,
    trace,
    upstream,
    mirror: (mirrorParts) => mirrorSessions({ ...mirrorParts, db: trace.db }),
    streaming: runtime.streaming,
    sequencer: server.hub.sequencer,
    token: parts.token,
    runInProcess: server.inject,
    runsHere,
    recovered: parts.recovered,
    forget: (sessionIds) => {
      for (const sessionId of sessionIds) runtime.release(sessionId);
    },
    familyOf: (sessionId) => seat.rootOf(sessionId),
    onBrokerLost: closeStreamsOfOtherNodes(server, runsHere, logger),
    adoptable: (sessionId) => sessions.turnState(sessionId).currentTurnId !== null,
    rowIdBlock: (block, usedInStore) => useRowIdBlock(trace.db, block, usedInStore),
    takeOver: takeOverHere({
      ...parts,
      sequencer: server.hub.sequencer,
      durableTurns: parts.prepared.durableTurns,
    }),
    lag: () => {
      // Read from the working copy; after a forced stop closed it, the last figure read stands.
      try {
        lastLag = { backlog: upstream.backlog, shippedAtUs: upstream.shippedAtUs };
      } catch {}
      return lastLag;
    },
  });
  upstream.onFenced(({ sessionIds }) => {
    const roots = [...new Set(sessionIds.map((sessionId) => seat.rootOf(sessionId)))];
    node.lost(roots);
    letFamiliesGo(runtime, roots);
  });
  return node;
}

/**
 * Takes a session over on this node (take-over.ts): the events brought in that this node's clients
 * were not given yet go to them first, in order, then the session's events are this node's own to
 * release, in this node's order. The turns it found cut go on (`whenHeld`) once the node holds the lease.
 */
export function takeOverHere(parts: {
  readonly trace: TraceContext;
  readonly runtime: Runtime;
  readonly sequencer: EventSequencer;
  readonly sessions: SessionRows;
  readonly pricingVersion: string;
  readonly logger: Logger;
  /** Default: the turns found cut are closed as failed (`runtime.on_restart: fail`). */
  readonly durableTurns?: DurableTurns;
}): (
  sessionId: string,
  read: (sessionId: string) => Promise<StoredSession>,
) => Promise<TakeOverReport & { readonly whenHeld: () => void }> {
  const { sequencer } = parts;
  return async (sessionId, read) => {
    const report = await takeOverSession(
      {
        read,
        trace: parts.trace,
        runtime: parts.runtime,
        pricingVersion: parts.pricingVersion,
        logger: parts.logger,
        durableTurns: parts.durableTurns,
        release: (events) => {
          for (const event of events) {
            const released = sequencer.remoteMark(event.session_id);
            if (released === undefined || event.id > released) sequencer.releaseRemote(event);
          }
        },
      },
      sessionId,
    );
    sequencer.forgetRemote(selfAndDescendants(parts.sessions, sessionId));
    return { ...report, whenHeld: () => resumeTakenTurns(parts.runtime, report, parts.logger) };
  };
}
