import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { MetisConfig } from '../config/schema.js';
import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import type { ForwardRefused } from '../http/session-router.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { StoreContext } from '../store/store-context.js';
import type { StoreUpstream } from '../store/store-upstream.js';
import type { EventSequencer } from '../stream/event-sequencer.js';
import { type Broker, connectBroker } from './broker.js';
import { clusterKeys } from './cluster-keys.js';
import {
  type ClusterNode,
  type ClusterTiming,
  defaultNodeId,
  joinCluster,
  refuseTakenName,
  SessionElsewhere,
  sessionsLeasedTo,
} from './cluster-node.js';
import { fanOutEvents } from './event-fanout.js';
import { forwardToOwner } from './forward-to-owner.js';
import { answerForwarded, FORWARDED_HEADER, type RunInProcess } from './request-forwarding.js';
import { sealBroker } from './sealed-broker.js';
import type { SessionMirror } from './session-mirror.js';
import type { DurableTurns } from './take-over.js';

/** The server's URL as other hosts reach it: a bind to every address is named by the host name. */
export function advertisedUrl(serverUrl: string): string {
  const url = new URL(serverUrl);
  if (url.hostname === '0.0.0.0' || url.hostname === '[::]') url.hostname = hostname();
  return url.origin;
}

/** Where each cluster setting came from (a flag, the environment, the config), for errors. */
export interface ClusterSettings {
  readonly nats?: string;
  readonly nodeId?: string;
}

/** How often a node beats, and how long without a beat counts as gone. */
export function clusterTiming(config: MetisConfig): ClusterTiming {
  return { heartbeatMs: config.cluster.heartbeat_ms, nodeTimeoutMs: config.cluster.node_timeout_ms };
}

/** This node's name: `cluster.node_id`, else the default for its data folder. */
export function clusterNodeId(config: MetisConfig, dataDir: string): string {
  return config.cluster.node_id ?? defaultNodeId(dataDir);
}

/** A node of a cluster once it serves: the node, the mirror of other nodes' sessions, forwarding. */
export interface JoinedNode extends ClusterNode {
  /** Brings a session this node does not run up to the store before a client reads it. */
  refresh(sessionId: string): Promise<void>;
  /**
   * A client of this node watches the session: its events are followed over NATS until the function
   * returned is called (session-mirror.ts `watch`).
   */
  watch(sessionId: string): () => void;
  /** Runs a request refused for a session another node runs on that node (http-app.ts ForwardRefused). */
  forwardRefused: ForwardRefused;
}

/** A node that checked its name and reached its broker, before the store is opened. */
export interface PreparedCluster {
  readonly nodeId: string;
  /** The sessions whose lease names this node: what it ran before a restart, its to recover. */
  leasedHere(): Promise<string[]>;
  /** What a take-over does with the turns a gone node cut (`runtime.on_restart`, `max_resumptions`). */
  readonly durableTurns: DurableTurns;
  /**
   * Registers the node (its server listens at `url`), starts publishing its sessions' events, mirrors
   * the other nodes' and answers the requests they forward.
   */
  join(
    parts: {
      url: string;
      trace: StoreContext;
      /** The working copy's shipper; null when the writer commits to PostgreSQL itself. */
      upstream: StoreUpstream | null;
      /**
       * How this node follows the sessions its clients watch and other nodes run: into its working copy
       * (session-mirror.ts) or, on PostgreSQL alone, in memory with catch-up from the store.
       */
      mirror: (parts: MirrorParts) => SessionMirror;
      streaming: StreamingChannel;
      sequencer: EventSequencer;
      /**
       * The server token, the same on every node: the cluster's keys derive from it (cluster-keys.ts).
       * Null (`server.auth: none`) is refused.
       */
      token: string | null;
      /** Runs a request another node forwarded in this node's HTTP app (answerForwarded). */
      runInProcess: RunInProcess;
      /** Whether this node runs the session (its lease, or its planner's). */
      runsHere: (sessionId: string) => boolean;
      forget: (sessionIds: readonly string[]) => void;
      /** The root of a session's delegation family, whose subject its events travel on. */
      familyOf: (sessionId: string) => string;
      /**
       * The broker is lost: the clients this node feeds from other nodes get no live events any more
       * and are told so (their streams end with a named error, and they reconnect).
       */
      onBrokerLost: () => void;
      /** What this start's crash recovery committed (the turns it closed), for the other nodes' clients. */
      recovered: readonly MetisEvent[];
    } & Pick<Parameters<typeof joinCluster>[0], 'lag' | 'rowIdBlock' | 'takeOver' | 'adoptable' | 'onLease'>,
  ): Promise<JoinedNode>;
  /** Gives up before joining (a later step of the start failed). */
  abort(): Promise<void>;
}

/** What a node's way of following other nodes' sessions is built from (`PreparedCluster.join`'s `mirror`). */
export interface MirrorParts {
  readonly broker: Broker;
  readonly nodeId: string;
  readonly sequencer: EventSequencer;
  /** Reads a session and its workers from the store, each after the seq given (session-pull.ts). */
  readonly read: ClusterNode['readSession'];
  readonly runsHere: (sessionId: string) => boolean;
  readonly forget: (sessionIds: readonly string[]) => void;
  readonly familyOf: (sessionId: string) => string;
  readonly logger: Logger;
}

/**
 * A node without a token has nothing to prove itself with to the others: anyone the broker lets in
 * could pass for it (docs/decisions.md "The broker proves nothing by itself").
 */
function noTokenRefusal(setting: string): MetisError {
  return new MetisError(
    'METIS_ERR_CLUSTER_CONFIG',
    `${setting}: a cluster node needs the server token, the same on every node (the nodes prove themselves to each other with it), and server.auth is "none"`,
    {
      hint: 'Remove server.auth: none, and give every node one token: METIS_TOKEN=$(openssl rand -hex 24), or server.bearer_token.',
    },
  );
}

/**
 * The first steps of a cluster node's start, in the order that makes each refusal name the right
 * setting: a cluster needs a PostgreSQL store and a token; a name another live node has is refused;
 * an unreachable broker is refused. Null when `cluster.nats` is not set.
 * @throws MetisError METIS_ERR_CLUSTER_CONFIG, METIS_ERR_NODE_ID_TAKEN, METIS_ERR_BROKER_UNREACHABLE
 */
export async function prepareCluster(
  config: MetisConfig,
  dataDir: string,
  logger: Logger,
  settings: ClusterSettings = {},
): Promise<PreparedCluster | null> {
  const natsUrl = config.cluster.nats;
  if (natsUrl === null) return null;
  const natsSetting = settings.nats ?? 'cluster.nats';
  const storeUrl = config.store.url;
  if (storeUrl === null)
    throw new MetisError(
      'METIS_ERR_CLUSTER_CONFIG',
      `${natsSetting}: a cluster's nodes share a PostgreSQL store, and none is set (store.url, --store or $METIS_STORE_URL)`,
    );
  // As resolveServerAuth decides it (local-token.ts): `none` only when no token is configured.
  if (config.server.auth === 'none' && config.server.bearer_token === null) throw noTokenRefusal(natsSetting);
  const timing = clusterTiming(config);
  if (timing.nodeTimeoutMs < 2 * timing.heartbeatMs)
    throw new MetisError(
      'METIS_ERR_CLUSTER_CONFIG',
      `cluster.node_timeout_ms (${timing.nodeTimeoutMs}) must be at least twice cluster.heartbeat_ms (${timing.heartbeatMs}), or a live node would look gone between two beats`,
      { hint: 'Raise cluster.node_timeout_ms or lower cluster.heartbeat_ms.' },
    );
  // Nodes on one host may share a token file; nodes on several each make their own, and then cannot
  // open each other's messages: said once here, since each dropped message is only logged sparingly.
  if (config.server.bearer_token === null && !process.env.METIS_TOKEN && !process.env.METIS_BEARER_TOKEN)
    logger.warn(
      "this cluster node takes its token from its token file: every node of a cluster needs the same token (METIS_TOKEN or server.bearer_token), or they cannot forward requests to each other nor read each other's events",
    );
  const nodeId = clusterNodeId(config, dataDir);
  await refuseTakenName(storeUrl, nodeId, timing, settings.nodeId ?? 'cluster.node_id');
  const connection = await connectBroker({ url: natsUrl, nodeId, setting: natsSetting, logger });
  return {
    nodeId,
    leasedHere: () => sessionsLeasedTo(storeUrl, nodeId),
    durableTurns: {
      onRestart: config.runtime.on_restart,
      maxResumptions: config.runtime.max_resumptions,
    },
    join: async (parts) => {
      const { trace, upstream, streaming, sequencer, url, token } = parts;
      if (token === null) {
        await connection.close();
        throw noTokenRefusal(natsSetting);
      }
      const keys = clusterKeys(token);
      // Every message on the broker, sealed: nothing from it is believed unless it opens.
      const broker = sealBroker(connection, keys.sealing, logger);
      const advertised = config.cluster.advertise_url ?? advertisedUrl(url);
      const node = await joinCluster({
        storeUrl,
        nodeId,
        url: advertised,
        broker,
        timing,
        logger,
        lag: parts.lag,
        rowIdBlock: parts.rowIdBlock,
        takeOver: parts.takeOver,
        adoptable: parts.adoptable,
        onLease: parts.onLease,
      });
      const stopFanOut = fanOutEvents({
        bus: trace.bus,
        writer: trace.writer,
        upstream,
        streaming,
        broker,
        nodeId,
        earlier: parts.recovered,
        runsHere: parts.runsHere,
        familyOf: parts.familyOf,
      });
      const mirror = parts.mirror({
        broker,
        nodeId,
        sequencer,
        read: node.readSession,
        runsHere: parts.runsHere,
        forget: parts.forget,
        familyOf: parts.familyOf,
        logger,
      });
      const stopWatching = broker.onDisconnect(parts.onBrokerLost);
      const stopAnswering = answerForwarded({
        broker,
        nodeId,
        key: keys.forwarding,
        run: parts.runInProcess,
        logger,
      });
      return {
        ...node,
        refresh: async (sessionId) => {
          if (parts.runsHere(sessionId)) return;
          // Without the broker a stream of another node's session would stay silent: refused, by name.
          if (broker.state !== 'connected')
            throw new MetisError(
              'METIS_ERR_BROKER_UNREACHABLE',
              `this node has lost its NATS broker, so it cannot follow session ${sessionId}, which another node runs; attach to another node, or try again in a moment`,
              { hint: 'The node rejoins by itself when the broker is back.' },
            );
          await mirror.refresh(sessionId);
        },
        watch: (sessionId) => mirror.watch(sessionId),
        forwardRefused: async (refusal, request) => {
          if (!(refusal instanceof SessionElsewhere) || request.headers[FORWARDED_HEADER] !== undefined)
            return null;
          // A request sent while the broker is away may be lost on the way, unanswered until the reply
          // timeout: refused at once instead, as a moment to wait out.
          if (broker.state !== 'connected')
            throw new MetisError(
              'METIS_ERR_BROKER_UNREACHABLE',
              `this node has lost its NATS broker, so it cannot pass the request to node ${refusal.owner.node_id}, which runs session ${refusal.sessionId}; try again in a moment`,
              { hint: 'The node rejoins by itself when the broker is back.' },
            );
          try {
            return await forwardToOwner({
              broker,
              from: { nodeId, key: keys.forwarding },
              owner: refusal.owner.node_id,
              request: { method: request.method, url: request.url, body: request.body },
              alive: (peer) => node.peers().some((record) => record.node_id === peer),
              checkEveryMs: timing.heartbeatMs,
              runInProcess: parts.runInProcess,
            });
          } catch (error) {
            // The owner is alive by the store and does not answer on the broker (or refused this
            // node's proof): the client is told where it runs (the refusal names it) rather than kept
            // waiting.
            logger.warn(
              { owner: refusal.owner.node_id, err: (error as Error).message },
              'could not forward a request to the node running its session',
            );
            return null;
          }
        },
        close: () => {
          stopWatching();
          stopAnswering();
          mirror.close();
          stopFanOut();
          return node.close();
        },
      };
    },
    abort: () => connection.close(),
  };
}
