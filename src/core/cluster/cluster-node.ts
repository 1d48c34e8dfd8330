import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import pg from 'pg';
import type { Logger } from 'pino';
import { NODE_ID_PATTERN } from '../config/schema.js';
import { MetisError } from '../errors.js';
import { BIGINT_AS_NUMBER } from '../store/postgres/pg-util.js';
import { packageVersion } from '../version.js';
import type { Broker } from './broker.js';
import {
  beat,
  describeNode,
  listNodes,
  markStopped,
  type NodeRecord,
  nodeState,
  registerNode,
} from './node-registry.js';

export interface ClusterTiming {
  readonly heartbeatMs: number;
  readonly nodeTimeoutMs: number;
}

/** This process as a node of a cluster: its name, its peers, and what `/healthz` says of the cluster. */
export interface ClusterNode {
  readonly nodeId: string;
  /** The other nodes alive at the last heartbeat. */
  peers(): readonly NodeRecord[];
  /** For `/healthz`, which needs no token: states only, no addresses or reasons (those are logged). */
  health(): { node_id: string; broker: { state: string } };
  /** Says goodbye in the store and closes the broker. Safe to call twice. */
  close(): Promise<void>;
}

const nowUs = () => Date.now() * 1000;

/**
 * The default node name: the host name, and a hash of the data folder so that two nodes on one machine
 * (each with its own folder) differ while a restart keeps its name.
 */
export function defaultNodeId(dataDir: string): string {
  const host = hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 48);
  const id = `${host || 'node'}-${createHash('sha256').update(dataDir).digest('hex').slice(0, 8)}`;
  return NODE_ID_PATTERN.test(id) ? id : `node-${id.slice(-8)}`;
}

function pool(url: string): pg.Pool {
  const created = new pg.Pool({
    connectionString: url,
    max: 1,
    types: BIGINT_AS_NUMBER,
    connectionTimeoutMillis: 5_000,
    query_timeout: 10_000,
    keepAlive: true,
  });
  created.on('error', () => {});
  return created;
}

/**
 * Refuses a name another live node uses (named, with where it runs). Runs before the store is opened, so
 * a second node under the same name is refused for that, not for the store it cannot share.
 * @throws MetisError METIS_ERR_NODE_ID_TAKEN
 */
export async function refuseTakenName(
  storeUrl: string,
  nodeId: string,
  timing: ClusterTiming,
  setting: string,
): Promise<void> {
  const client = pool(storeUrl);
  try {
    const nodes = await listNodes(client).catch(() => [] as NodeRecord[]); // the store's own check names its problems
    const holder = nodes.find(
      (node) => node.node_id === nodeId && nodeState(node, nowUs(), timing.nodeTimeoutMs) === 'alive',
    );
    if (holder !== undefined)
      throw new MetisError(
        'METIS_ERR_NODE_ID_TAKEN',
        `${setting}: node "${nodeId}" already runs: ${describeNode(holder)}`,
      );
  } finally {
    await client.end().catch(() => {});
  }
}

/** The live nodes of the store, for a refusal that names who holds it. */
export async function liveNodes(storeUrl: string, timing: ClusterTiming): Promise<NodeRecord[]> {
  const client = pool(storeUrl);
  try {
    const nodes = await listNodes(client);
    return nodes.filter((node) => nodeState(node, nowUs(), timing.nodeTimeoutMs) === 'alive');
  } catch {
    return [];
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Registers this node in the store (after the server listens: its URL is part of the record), beats
 * every `heartbeatMs`, and keeps the list of peers that beat. A beat that fails (the store away) is
 * retried at the next one; the node's state in the store goes `silent` after `nodeTimeoutMs`.
 */
export async function joinCluster(options: {
  readonly storeUrl: string;
  readonly nodeId: string;
  readonly url: string;
  readonly broker: Broker;
  readonly timing: ClusterTiming;
  readonly logger: Logger;
}): Promise<ClusterNode> {
  const { nodeId, broker, timing, logger } = options;
  const client = pool(options.storeUrl);
  const startedAtUs = nowUs();
  let peers: NodeRecord[] = [];
  const refreshPeers = async () => {
    const nodes = await listNodes(client);
    peers = nodes.filter(
      (node) => node.node_id !== nodeId && nodeState(node, nowUs(), timing.nodeTimeoutMs) === 'alive',
    );
  };
  try {
    await registerNode(
      client,
      { node_id: nodeId, url: options.url, host: hostname(), pid: process.pid, version: packageVersion() },
      startedAtUs,
    );
    await refreshPeers();
  } catch (error) {
    await client.end().catch(() => {});
    await broker.close();
    throw error;
  }
  let beating: Promise<void> | null = null;
  const timer = setInterval(() => {
    beating ??= (async () => {
      try {
        if (!(await beat(client, nodeId, startedAtUs, nowUs())))
          logger.error({ node_id: nodeId }, 'another start took this node name over in the store');
        await refreshPeers();
      } catch (error) {
        logger.warn({ err: (error as Error).message }, 'could not record this node as alive; trying again');
      } finally {
        beating = null;
      }
    })();
  }, timing.heartbeatMs);
  timer.unref();
  let closing: Promise<void> | null = null;
  return {
    nodeId,
    peers: () => peers,
    health: () => ({ node_id: nodeId, broker: { state: broker.state } }),
    close: () => {
      closing ??= (async () => {
        clearInterval(timer);
        await beating;
        await markStopped(client, nodeId, startedAtUs, nowUs()).catch((error: unknown) =>
          logger.warn({ err: (error as Error).message }, 'could not record this node as stopped'),
        );
        await client.end().catch(() => {});
        await broker.close();
      })();
      return closing;
    },
  };
}
