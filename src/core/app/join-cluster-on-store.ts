import type { Logger } from 'pino';
import type { JoinedNode, PreparedCluster } from '../cluster/cluster-start.js';
import { followSessions } from '../cluster/pg-session-follower.js';
import type { DurableTurns } from '../cluster/take-over.js';
import { takeOverFromStore } from '../cluster/take-over-on-store.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import type { RecoveryReport } from '../runtime/crash-recovery.js';
import { resumeCutTurns } from '../runtime/resume-cut-turns.js';
import type { Runtime } from '../runtime/runtime.js';
import type { CutTurn } from '../runtime/turn-resume-plan.js';
import type { LeaseTable } from '../store/postgres/lease-table.js';
import type { PostgresContext } from '../store/postgres/pg-context.js';
import { pgFollowReads } from '../store/postgres/pg-follow-reads.js';
import { leaseTokensOf } from '../store/postgres/session-leases.js';
import type { EventSequencer } from '../stream/event-sequencer.js';
import { closeStreamsOfOtherNodes, letFamiliesGo } from './cluster-losses.js';
import type { ClusterSeat } from './cluster-seat.js';
import type { MetisServer } from './metis-server.js';

/** What a cluster node on PostgreSQL alone is made of once its server listens. */
export interface StoreClusterParts {
  readonly prepared: PreparedCluster;
  readonly seat: ClusterSeat;
  readonly server: MetisServer;
  readonly trace: PostgresContext;
  readonly runtime: Runtime;
  readonly leases: LeaseTable;
  readonly token: string | null;
  /** What this start's recovery committed, for the other nodes' clients. */
  readonly recovered: readonly MetisEvent[];
  readonly pricingVersion: string;
  readonly logger: Logger;
}

/** What a node restarting under its name found of the families it held, and closed or resumes. */
export interface LeasedRecovery {
  readonly turns: number;
  readonly resumable: readonly CutTurn[];
  /** The sessions of those families: their queued messages are taken up with the turns. */
  readonly sessionIds: readonly string[];
  /** The events recovery emitted, published to the other nodes once the node has joined. */
  readonly events: readonly MetisEvent[];
}

/** The start's recovery report of a cluster node: the turns its leased families' recovery closed. */
export function leasedRecoveryReport(leased: LeasedRecovery): RecoveryReport {
  return {
    turns: leased.turns,
    modelCalls: 0,
    toolCalls: 0,
    delegations: 0,
    workerSessions: 0,
    toolCallRows: 0,
    resumable: leased.resumable,
    capReached: 0,
  };
}

/**
 * A node on PostgreSQL alone restarting under its name: the families whose lease still names it are
 * its own again, under the same tokens (no other node took them), and what its crash left open there
 * is closed or planned to resume, as a take-over does (take-over-on-store.ts). Before the server reads
 * a request, so no client sees those families half-recovered.
 */
export async function recoverLeasedFamilies(
  parts: Pick<StoreClusterParts, 'trace' | 'runtime' | 'leases' | 'pricingVersion' | 'logger'> & {
    readonly nodeId: string;
    readonly durableTurns: DurableTurns;
  },
): Promise<LeasedRecovery> {
  const { trace } = parts;
  const events: MetisEvent[] = [];
  const stop = trace.bus.onEmit((event) => {
    if (event.session_id !== SYSTEM_SESSION_ID && event.seq !== null) events.push(event);
  });
  let turns = 0;
  const resumable: CutTurn[] = [];
  const sessionIds: string[] = [];
  try {
    for (const { sessionId: root, token } of await leaseTokensOf(trace.pool, parts.nodeId)) {
      // A worker's lease is its root's: only roots are leased, but an old store may name others.
      const report = await takeOverFromStore(parts, root, token).catch((error: unknown) => {
        parts.logger.warn(
          { session_id: root, err: (error as Error).message },
          'could not recover a session this node held before its restart',
        );
        return null;
      });
      if (report === null) continue;
      turns += report.recoveredTurns;
      resumable.push(...report.resumable);
      sessionIds.push(...report.sessionIds);
    }
  } finally {
    stop();
  }
  return { turns, resumable, sessionIds, events };
}

/**
 * The cluster stage of a node on PostgreSQL alone (docs/plans/store-port.md step 9), once its server
 * listens: it joins with no working copy. Its writer commits to PostgreSQL under its leases' tokens
 * (`leases`, told of each lease by the node), the fan-out publishes what PostgreSQL holds, the sessions
 * its clients watch are followed from the broker with catch-up from PostgreSQL (pg-session-follower.ts),
 * and a session taken over is loaded from PostgreSQL, its cut turns closed or resumed, and the events
 * this node's clients missed released to them first (take-over-on-store.ts).
 */
export async function joinClusterOnStore(parts: StoreClusterParts): Promise<JoinedNode> {
  const { seat, server, trace, runtime, leases, logger } = parts;
  const runsHere = (sessionId: string) => seat.runsHere(sessionId);
  const sequencer = server.hub.sequencer;
  // As the fan-out publishes: a streaming event of a session this node may have lost is nobody's.
  sequencer.admitStreaming((event) => runsHere(event.session_id));
  const reads = pgFollowReads(trace.pool);
  const node = await parts.prepared.join({
    url: server.url,
    trace,
    upstream: null,
    mirror: (mirror) => followSessions({ ...mirror, reads }),
    streaming: runtime.streaming,
    sequencer,
    token: parts.token,
    runInProcess: server.inject,
    runsHere,
    recovered: parts.recovered,
    forget: (sessionIds) => {
      for (const sessionId of sessionIds) if (!runsHere(sessionId)) runtime.release(sessionId);
    },
    familyOf: (sessionId) => seat.rootOf(sessionId),
    onBrokerLost: closeStreamsOfOtherNodes(server, runsHere, logger),
    // The store says which orphaned sessions have a turn open (orphanedLeases): nothing to add here.
    adoptable: () => false,
    // The context took this node's block of row ids when it opened.
    rowIdBlock: () => {},
    onLease: (root, token) => (token === null ? leases.lose([root]) : leases.hold(root, token)),
    takeOver: (root, _read, token) => takeOverHere(parts, sequencer, root, token),
    lag: () => ({ backlog: trace.writer.buffered.events, shippedAtUs: null }),
  });
  leases.onLost((roots) => {
    node.lost(roots);
    letFamiliesGo(runtime, roots);
  });
  return node;
}

/**
 * Takes a family over here: the events stored past what this node's clients were given go to them
 * first, in order (the previous owner may have died before publishing them: issue 35, cause 6), then
 * the family's events are this node's own to release; its cut turns resume once the lease is held.
 */
async function takeOverHere(
  parts: StoreClusterParts,
  sequencer: EventSequencer,
  root: string,
  token: number,
): Promise<{ readonly whenHeld: () => void }> {
  const { runtime, logger } = parts;
  const report = await takeOverFromStore(
    {
      ...parts,
      durableTurns: parts.prepared.durableTurns,
      released: (sessionId) => sequencer.remoteMark(sessionId),
    },
    root,
    token,
  );
  for (const event of report.missed) {
    const released = sequencer.remoteMark(event.session_id);
    if (released === undefined || event.id > released) sequencer.releaseRemote(event);
  }
  sequencer.forgetRemote(report.sessionIds);
  return {
    whenHeld: () => resumeCutTurns(runtime, report.resumable, logger, 'after a take-over', report.sessionIds),
  };
}
