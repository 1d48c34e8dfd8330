import type pg from 'pg';
import { ROW_ID_BLOCK } from '../row-ids.js';

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
  /** Changes committed on the node and not yet in the store, at its last beat. */
  readonly backlog: number;
  /** When the node last shipped something to the store. */
  readonly shipped_at_us: number | null;
}

/** What a node says of its shipping at each beat. */
export interface NodeLag {
  readonly backlog: number;
  readonly shippedAtUs: number | null;
}

/** `alive`: beating; `stopped`: said goodbye; `silent`: stopped beating without a goodbye (killed, cut off). */
export type NodeState = 'alive' | 'stopped' | 'silent';

export function nodeState(node: NodeRecord, nowUs: number, timeoutMs: number): NodeState {
  if (node.stopped_at_us !== null) return 'stopped';
  return nowUs - node.heartbeat_at_us <= timeoutMs * 1000 ? 'alive' : 'silent';
}

/** The nodes of a listing that are alive at its time. */
export function aliveNodes(
  listing: { nodes: readonly NodeRecord[]; nowUs: number },
  timeoutMs: number,
): NodeRecord[] {
  return listing.nodes.filter((node) => nodeState(node, listing.nowUs, timeoutMs) === 'alive');
}

/**
 * The store's clock in µs, in SQL. Every beat is stamped and every liveness judged by it, never by a
 * node's own clock: two hosts whose clocks differ still agree on who is alive.
 */
export const STORE_NOW_US = '(extract(epoch from clock_timestamp()) * 1000000)::bigint';

/** Every node the store has seen, by name, and the store's time now (to judge them by). */
export async function listNodes(
  client: pg.ClientBase | pg.Pool,
): Promise<{ nodes: NodeRecord[]; nowUs: number }> {
  const present = await client.query<{ present: boolean; now_us: number }>(
    `SELECT to_regclass('metis_nodes') IS NOT NULL AS present, ${STORE_NOW_US} AS now_us`,
  );
  const nowUs = present.rows[0]!.now_us;
  if (!present.rows[0]!.present) return { nodes: [], nowUs };
  return {
    nodes: (await client.query<NodeRecord>('SELECT * FROM metis_nodes ORDER BY node_id')).rows,
    nowUs,
  };
}

/** Records a node as started now (again, if its name was used before); returns its start, by the store's clock. */
export async function registerNode(
  client: pg.ClientBase | pg.Pool,
  node: Pick<NodeRecord, 'node_id' | 'url' | 'host' | 'pid' | 'version'>,
): Promise<number> {
  const registered = await client.query<{ started_at_us: number }>(
    `INSERT INTO metis_nodes (node_id, url, host, pid, version, started_at_us, heartbeat_at_us, stopped_at_us)
     VALUES ($1, $2, $3, $4, $5, ${STORE_NOW_US}, ${STORE_NOW_US}, NULL)
     ON CONFLICT (node_id) DO UPDATE SET url = excluded.url, host = excluded.host, pid = excluded.pid,
       version = excluded.version, started_at_us = excluded.started_at_us,
       heartbeat_at_us = excluded.heartbeat_at_us, stopped_at_us = NULL, backlog = 0
     RETURNING started_at_us`,
    [node.node_id, node.url, node.host, node.pid, node.version],
  );
  return registered.rows[0]!.started_at_us;
}

/** Records that the node is alive, and its lag; false when its row was taken over (another start under its name). */
export async function beat(
  client: pg.ClientBase | pg.Pool,
  nodeId: string,
  startedAtUs: number,
  lag: NodeLag,
): Promise<boolean> {
  const updated = await client.query(
    `UPDATE metis_nodes SET heartbeat_at_us = ${STORE_NOW_US}, backlog = $3, shipped_at_us = coalesce($4, shipped_at_us)
      WHERE node_id = $1 AND started_at_us = $2 AND stopped_at_us IS NULL`,
    [nodeId, startedAtUs, lag.backlog, lag.shippedAtUs],
  );
  return (updated.rowCount ?? 0) > 0;
}

export async function markStopped(
  client: pg.ClientBase | pg.Pool,
  nodeId: string,
  startedAtUs: number,
): Promise<void> {
  await client.query(
    `UPDATE metis_nodes SET stopped_at_us = ${STORE_NOW_US} WHERE node_id = $1 AND started_at_us = $2`,
    [nodeId, startedAtUs],
  );
}

/** "node-a (http://…, pid 42 on host, since …)": how refusals and the banner name a node. */
export function describeNode(node: NodeRecord): string {
  const since = new Date(node.started_at_us / 1000).toISOString();
  return `${node.node_id} (${node.url}, pid ${node.pid} on ${node.host}, since ${since})`;
}

/**
 * The node's block of row ids (metis_node_row_blocks, migration 7): the one it had before, else a new
 * one no other node has. A node name runs on one live node at a time (a second start under it is
 * refused), so two live nodes never hand out keys from one block.
 */
/**
 * The highest key the store holds from a block (tool calls, pattern outcomes), or null: a node's new
 * working copy need not hold the rows its block keyed before (a session another node runs now), and
 * the next key must not be one of theirs.
 */
export async function usedInRowIdBlock(
  client: pg.ClientBase | pg.Pool,
  block: number,
): Promise<number | null> {
  const first = block * ROW_ID_BLOCK;
  const used = await client.query<{ used: number | null }>(
    `SELECT greatest(
       (SELECT max(row_id) FROM tool_calls WHERE row_id >= $1 AND row_id < $2),
       (SELECT max(id) FROM pattern_outcomes WHERE id >= $1 AND id < $2)) AS used`,
    [first, first + ROW_ID_BLOCK],
  );
  return used.rows[0]?.used ?? null;
}

export async function takeRowIdBlock(client: pg.ClientBase | pg.Pool, nodeId: string): Promise<number> {
  const kept = await client.query<{ block: number }>(
    'SELECT block FROM metis_node_row_blocks WHERE node_id = $1',
    [nodeId],
  );
  if (kept.rows[0] !== undefined) return kept.rows[0].block;
  const taken = await client.query<{ block: number }>(
    `INSERT INTO metis_node_row_blocks (node_id, block) VALUES ($1, nextval('metis_row_id_blocks'))
     ON CONFLICT (node_id) DO UPDATE SET block = metis_node_row_blocks.block
     RETURNING block`,
    [nodeId],
  );
  return taken.rows[0]!.block;
}
