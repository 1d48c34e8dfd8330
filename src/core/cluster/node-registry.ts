import type pg from 'pg';

/** A node as `metis_nodes` records it. */
export interface NodeRecord {
  readonly node_id: string;
  readonly url: string;
  readonly host: string;
  readonly pid: number;
  readonly version: string;
  readonly started_at_us: number;
  readonly heartbeat_at_us: number;
  readonly stopped_at_us: number | null;
}

/** `alive`: beating; `stopped`: said goodbye; `silent`: stopped beating without a goodbye (killed, cut off). */
export type NodeState = 'alive' | 'stopped' | 'silent';

export function nodeState(node: NodeRecord, nowUs: number, timeoutMs: number): NodeState {
  if (node.stopped_at_us !== null) return 'stopped';
  return nowUs - node.heartbeat_at_us <= timeoutMs * 1000 ? 'alive' : 'silent';
}

/** Every node the store has seen, by name. */
export async function listNodes(client: pg.ClientBase | pg.Pool): Promise<NodeRecord[]> {
  const present = await client.query<{ present: boolean }>(
    "SELECT to_regclass('metis_nodes') IS NOT NULL AS present",
  );
  if (!present.rows[0]!.present) return [];
  return (await client.query<NodeRecord>('SELECT * FROM metis_nodes ORDER BY node_id')).rows;
}

/** Records a node as started now (again, if its name was used before). */
export async function registerNode(
  client: pg.ClientBase | pg.Pool,
  node: Pick<NodeRecord, 'node_id' | 'url' | 'host' | 'pid' | 'version'>,
  nowUs: number,
): Promise<void> {
  await client.query(
    `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us, stopped_at_us)
     VALUES ($1, $2, $3, $4, $5, $6, $6, NULL)
     ON CONFLICT (node_id) DO UPDATE SET url = excluded.url, host = excluded.host, pid = excluded.pid,
       version = excluded.version, started_at_us = excluded.started_at_us,
       heartbeat_at_us = excluded.heartbeat_at_us, stopped_at_us = NULL`,
    [node.node_id, node.url, node.host, node.pid, node.version, nowUs],
  );
}

/** Records that the node is alive; false when its row was taken over (another start under its name). */
export async function beat(
  client: pg.ClientBase | pg.Pool,
  nodeId: string,
  startedAtUs: number,
  nowUs: number,
): Promise<boolean> {
  const updated = await client.query(
    'UPDATE metis_nodes SET heartbeat_at_us = $3 WHERE node_id = $1 AND started_at_us = $2 AND stopped_at_us IS NULL',
    [nodeId, startedAtUs, nowUs],
  );
  return (updated.rowCount ?? 0) > 0;
}

export async function markStopped(
  client: pg.ClientBase | pg.Pool,
  nodeId: string,
  startedAtUs: number,
  nowUs: number,
): Promise<void> {
  await client.query('UPDATE metis_nodes SET stopped_at_us = $3 WHERE node_id = $1 AND started_at_us = $2', [
    nodeId,
    startedAtUs,
    nowUs,
  ]);
}

/** "node-a (http://…, pid 42 on host, since …)": how refusals and the banner name a node. */
export function describeNode(node: NodeRecord): string {
  const since = new Date(node.started_at_us / 1000).toISOString();
  return `${node.node_id} (${node.url}, pid ${node.pid} on ${node.host}, since ${since})`;
}
