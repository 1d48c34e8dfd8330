import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { MetisConfig } from '../config/schema.js';
import { MetisError } from '../errors.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { TraceWriter } from '../store/trace-writer.js';
import { connectBroker } from './broker.js';
import {
  type ClusterNode,
  type ClusterTiming,
  defaultNodeId,
  joinCluster,
  liveNodes,
  refuseTakenName,
} from './cluster-node.js';
import { fanOutEvents } from './event-fanout.js';
import { describeNode } from './node-registry.js';

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

/** A node that checked its name and reached its broker, before the store is opened. */
export interface PreparedCluster {
  /** Turns "the store is locked" into a refusal naming the node that holds it. */
  explainLocked(error: unknown): Promise<unknown>;
  /** Registers the node (its server listens at `url`) and starts publishing its sessions' events. */
  join(
    parts: { url: string; writer: TraceWriter; streaming: StreamingChannel } & Pick<
      Parameters<typeof joinCluster>[0],
      'lag' | 'rowIdBlock' | 'takeOver'
    >,
  ): Promise<ClusterNode>;
  /** Gives up before joining (a later step of the start failed). */
  abort(): Promise<void>;
}

/**
 * The first steps of a cluster node's start, in the order that makes each refusal name the right
 * setting: a cluster needs a PostgreSQL store; a name another live node has is refused; an unreachable
 * broker is refused. Null when `cluster.nats` is not set.
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
  const timing = clusterTiming(config);
  if (timing.nodeTimeoutMs < 2 * timing.heartbeatMs)
    throw new MetisError(
      'METIS_ERR_CLUSTER_CONFIG',
      `cluster.node_timeout_ms (${timing.nodeTimeoutMs}) must be at least twice cluster.heartbeat_ms (${timing.heartbeatMs}), or a live node would look gone between two beats`,
      { hint: 'Raise cluster.node_timeout_ms or lower cluster.heartbeat_ms.' },
    );
  const nodeId = clusterNodeId(config, dataDir);
  await refuseTakenName(storeUrl, nodeId, timing, settings.nodeId ?? 'cluster.node_id');
  const broker = await connectBroker({ url: natsUrl, nodeId, setting: natsSetting, logger });
  return {
    explainLocked: async (error) => {
      if (!(error instanceof MetisError) || error.code !== 'METIS_ERR_DB_LOCKED') return error;
      const holders = await liveNodes(storeUrl, timing);
      if (holders.length === 0) return error;
      return new MetisError(
        'METIS_ERR_DB_LOCKED',
        `the store is served by node ${holders.map(describeNode).join(', ')}; a store serves one node at a ` +
          'time for now (docs/scale-out.md)',
        { hint: 'Stop that node first, or point this one at another store.' },
      );
    },
    join: async ({ url, writer, streaming, lag, rowIdBlock, takeOver }) => {
      const advertised = config.cluster.advertise_url ?? advertisedUrl(url);
      const node = await joinCluster({
        storeUrl,
        nodeId,
        url: advertised,
        broker,
        timing,
        logger,
        lag,
        rowIdBlock,
        takeOver,
      });
      const stopFanOut = fanOutEvents({ writer, streaming, broker, nodeId });
      return {
        ...node,
        close: () => {
          stopFanOut();
          return node.close();
        },
      };
    },
    abort: () => broker.close(),
  };
}
