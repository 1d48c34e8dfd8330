import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { listNodes, nodeState } from '../core/store/postgres/node-registry.js';
import { connectReadableStore } from '../core/store/postgres/pg-inspect.js';
import { listLeases } from '../core/store/postgres/session-leases.js';
import { pickStore } from './store-option.js';
import { table } from './text-table.js';

export interface ClusterStatusOptions {
  store?: string;
  config?: string;
  json?: boolean;
}

/** "3 s ago", "2 min ago": how long since a node last beat. */
function ago(us: number, nowUs: number): string {
  const seconds = Math.max(0, Math.round((nowUs - us) / 1e6));
  if (seconds < 120) return `${seconds} s ago`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

/** `metis cluster status`: the nodes the cluster's store knows, read from it (no node is asked). */
export async function clusterStatusCommand(options: ClusterStatusOptions): Promise<void> {
  const { config } = await loadConfig({ explicitPath: options.config ?? null });
  const store = pickStore(options, config.store.url);
  if (store === null)
    throw new MetisError(
      'METIS_ERR_CLUSTER_CONFIG',
      "metis cluster status reads the cluster's PostgreSQL store, and none is set",
      { hint: 'Pass --store postgres://…, or set $METIS_STORE_URL or store.url in config.' },
    );
  const client = await connectReadableStore(store.url);
  let nodes: Awaited<ReturnType<typeof listNodes>>['nodes'];
  let leases: Awaited<ReturnType<typeof listLeases>>;
  let nowUs: number;
  try {
    ({ nodes, nowUs } = await listNodes(client));
    leases = await listLeases(client);
  } finally {
    await client.end().catch(() => {});
  }
  const timeoutMs = config.cluster.node_timeout_ms;
  const rows = nodes.map((node) => ({
    node_id: node.node_id,
    state: nodeState(node, nowUs, timeoutMs),
    url: node.url,
    host: node.host,
    pid: node.pid,
    version: node.version,
    started_at: new Date(node.started_at_us / 1000).toISOString(),
    last_beat_at: new Date(node.heartbeat_at_us / 1000).toISOString(),
    stopped_at: node.stopped_at_us === null ? null : new Date(node.stopped_at_us / 1000).toISOString(),
    backlog: node.backlog,
    shipped_at: node.shipped_at_us === null ? null : new Date(node.shipped_at_us / 1000).toISOString(),
    // Owned now: a node that is not alive owns nothing (its leases are free to take).
    sessions:
      nodeState(node, nowUs, timeoutMs) === 'alive'
        ? leases.filter((lease) => lease.node_id === node.node_id).length
        : 0,
  }));
  const states = new Map(rows.map((row) => [row.node_id, row.state]));
  // A lease is only as good as its node: one held by a node that is not alive is free to take.
  const leaseRows = leases.map((lease) => ({
    session_id: lease.session_id,
    node_id: lease.node_id,
    held: states.get(lease.node_id) === 'alive',
    since: new Date(lease.acquired_at_us / 1000).toISOString(),
  }));
  if (options.json) {
    console.log(JSON.stringify({ node_timeout_ms: timeoutMs, nodes: rows, leases: leaseRows }));
    return;
  }
  if (rows.length === 0) {
    console.log('no node has run on this store yet');
    return;
  }
  const alive = rows.filter((row) => row.state === 'alive').length;
  console.log(`${alive} of ${rows.length} nodes alive (silent: no beat for ${timeoutMs / 1000} s)\n`);
  console.log(
    table([
      ['NODE', 'STATE', 'URL', 'PROCESS', 'VERSION', 'STARTED', 'LAST BEAT', 'SESSIONS', 'LAG'],
      ...nodes.map((node, i) => [
        node.node_id,
        rows[i]!.state,
        node.url,
        `pid ${node.pid} on ${node.host}`,
        node.version,
        rows[i]!.started_at,
        node.stopped_at_us === null
          ? ago(node.heartbeat_at_us, nowUs)
          : `stopped ${ago(node.stopped_at_us, nowUs)}`,
        String(rows[i]!.sessions),
        describeLag(node.backlog, node.shipped_at_us, nowUs),
      ]),
    ]),
  );
  if (leaseRows.length === 0) return;
  console.log('\nsessions and their owners (a lease is free once its node is not alive):\n');
  console.log(
    table([
      ['SESSION', 'NODE', 'HELD', 'SINCE'],
      ...leaseRows.map((lease) => [
        lease.session_id,
        lease.node_id,
        lease.held ? 'yes' : 'free',
        lease.since,
      ]),
    ]),
  );
}

/** "0 waiting" or "12 waiting, last shipped 3 s ago": what a node had not yet put in the store. */
function describeLag(backlog: number, shippedAtUs: number | null, nowUs: number): string {
  const last = shippedAtUs === null ? '' : `, last shipped ${ago(shippedAtUs, nowUs)}`;
  return `${backlog} waiting${last}`;
}
