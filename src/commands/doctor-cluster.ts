import { dirname } from 'node:path';
import { connectBroker, redactNatsUrl } from '../core/cluster/broker.js';
import { liveNodes } from '../core/cluster/cluster-node.js';
import { clusterNodeId, clusterTiming } from '../core/cluster/cluster-start.js';
import type { MetisConfig } from '../core/config/schema.js';
import { silentLogger } from '../core/logger.js';
import { resolveDbPath } from '../core/store/paths.js';
import { describeNode } from '../core/store/postgres/node-registry.js';
import { pickCluster } from './cluster-option.js';
import type { Check } from './doctor-checks.js';
import { pickStore } from './store-option.js';

/**
 * The cluster `metis serve` would join, when `cluster.nats` (or `$METIS_NATS_URL`) is set: that a store
 * is set beside it, that the broker answers, and that no live node has this node's name. Connects to the
 * broker and closes again; changes nothing. Null outside a cluster.
 */
export async function checkCluster(config: MetisConfig): Promise<Check | null> {
  let setting: string;
  let store: ReturnType<typeof pickStore>;
  try {
    // The broker as metis serve picks it: $METIS_NATS_URL over cluster.nats, checked the same way.
    setting = pickCluster({}, config).nats ?? 'cluster.nats';
    if (config.cluster.nats === null) return null;
    store = pickStore({}, config.store.url);
  } catch (error) {
    return { name: 'cluster', status: 'problem', detail: (error as Error).message };
  }
  const nats = config.cluster.nats;
  if (store === null)
    return {
      name: 'cluster',
      status: 'problem',
      detail: `${setting} is set, and no PostgreSQL store: a cluster's nodes share one`,
      hint: 'Set store.url (or $METIS_STORE_URL) to the cluster store.',
    };
  const nodeId = clusterNodeId(config, dirname(resolveDbPath(config.storage.database)));
  try {
    const broker = await connectBroker({
      url: nats,
      nodeId: `${nodeId}-doctor`,
      setting,
      logger: silentLogger(),
    });
    await broker.close();
  } catch (error) {
    return {
      name: 'cluster',
      status: 'problem',
      detail: (error as Error).message,
      hint: 'Start the NATS server, or fix the URL (host, port, credentials).',
    };
  }
  const alive = await liveNodes(store.url, clusterTiming(config));
  const holder = alive.find((node) => node.node_id === nodeId);
  if (holder !== undefined)
    return {
      name: 'cluster',
      status: 'problem',
      detail: `node name "${nodeId}" is taken: ${describeNode(holder)}`,
      hint: 'Stop that node, or give this one another name (cluster.node_id or --node-id).',
    };
  const others =
    alive.length === 0 ? 'no node alive' : `alive: ${alive.map((node) => node.node_id).join(', ')}`;
  return {
    name: 'cluster',
    status: 'ok',
    detail: `broker ${redactNatsUrl(nats)} answers (${setting}); node "${nodeId}" is free; ${others}`,
  };
}
