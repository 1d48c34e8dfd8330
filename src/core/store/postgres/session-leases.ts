import type pg from 'pg';
import { type NodeRecord, nodeState, STORE_NOW_US } from './node-registry.js';

/** A session's owner as `metis_session_leases` and `metis_nodes` say together. */
export interface LeaseRecord {
  readonly session_id: string;
  readonly node_id: string;
  readonly acquired_at_us: number;
}

/**
 * The answer to "may this node run the session's turns?": yes, with the lease's fencing token, or the
 * live node that does. The token is new whenever the session changes owner (schema 14), so a write that
 * carries it proves its node holds the session now, not that it did once (docs/plans/store-port.md §4).
 */
export type LeaseOutcome =
  | { readonly held: true; readonly taken: boolean; readonly token: number }
  | { readonly held: false; readonly owner: NodeRecord };

/**
 * Makes `nodeId` the owner of `sessionId` unless another node owns it and is alive (beat within
 * `nodeTimeoutMs`, not stopped): a lease lives as long as its node, so it is renewed by the node's beat
 * and expires with it. `taken` says the session changed owner (its rows may have moved on since this
 * node last held it). One transaction, the lease row locked: two nodes asking at once get one answer.
 */
export async function acquireLease(
  client: pg.ClientBase,
  sessionId: string,
  nodeId: string,
  nodeTimeoutMs: number,
): Promise<LeaseOutcome> {
  // A session nobody held has no row to lock: two nodes may both try to insert it. The loser finds the
  // winner's row on its next round, locked, and answers from it.
  for (;;) {
    const outcome = await attempt(client, sessionId, nodeId, nodeTimeoutMs);
    if (outcome !== null) return outcome;
  }
}

async function attempt(
  client: pg.ClientBase,
  sessionId: string,
  nodeId: string,
  nodeTimeoutMs: number,
): Promise<LeaseOutcome | null> {
  await client.query('BEGIN');
  try {
    const nowUs = (await client.query<{ now_us: number }>(`SELECT ${STORE_NOW_US} AS now_us`)).rows[0]!
      .now_us;
    // The lease row is locked alone, and its node read by a statement of its own: after waiting on the
    // lock, PostgreSQL re-checks only the locked row of a join, and handed back the joined node's columns
    // empty, so a waiter read a dead owner where a live one had just taken the lease (issue 35, cause 2).
    const lease = (
      await client.query<LeaseRecord & { token: string }>(
        `SELECT session_id, node_id, acquired_at_us, token FROM metis_session_leases
          WHERE session_id = $1 FOR UPDATE`,
        [sessionId],
      )
    ).rows[0];
    const current =
      lease === undefined
        ? undefined
        : {
            ...lease,
            node:
              (
                await client.query<{ node: NodeRecord }>(
                  'SELECT to_jsonb(n.*) AS node FROM metis_nodes n WHERE node_id = $1',
                  [lease.node_id],
                )
              ).rows[0]?.node ?? null,
          };
    let outcome: LeaseOutcome | null;
    if (current === undefined) {
      const inserted = await client.query<{ token: string }>(
        `INSERT INTO metis_session_leases (session_id, node_id, acquired_at_us) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO NOTHING RETURNING token`,
        [sessionId, nodeId, nowUs],
      );
      const row = inserted.rows[0];
      outcome = row === undefined ? null : { held: true, taken: false, token: Number(row.token) };
    } else if (current.node_id === nodeId) {
      outcome = { held: true, taken: false, token: Number(current.token) };
    } else if (current.node !== null && nodeState(current.node, nowUs, nodeTimeoutMs) === 'alive') {
      outcome = { held: false, owner: current.node };
    } else {
      const taken = await client.query<{ token: string }>(
        `UPDATE metis_session_leases SET node_id = $2, acquired_at_us = $3, token = nextval('metis_lease_tokens')
          WHERE session_id = $1 RETURNING token`,
        [sessionId, nodeId, nowUs],
      );
      outcome = { held: true, taken: true, token: Number(taken.rows[0]!.token) };
    }
    await client.query('COMMIT');
    return outcome;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** Every lease, with its node's state, for `metis cluster status`. */
export async function listLeases(client: pg.ClientBase): Promise<LeaseRecord[]> {
  const present = await client.query<{ present: boolean }>(
    "SELECT to_regclass('metis_session_leases') IS NOT NULL AS present",
  );
  if (!present.rows[0]!.present) return [];
  return (
    await client.query<LeaseRecord>(
      'SELECT session_id, node_id, acquired_at_us FROM metis_session_leases ORDER BY node_id, session_id',
    )
  ).rows;
}

/** The sessions whose lease names `nodeId`: what a node restarting under its name owned before. */
export async function leasedTo(client: pg.ClientBase | pg.Pool, nodeId: string): Promise<string[]> {
  const leases = await client.query<{ session_id: string }>(
    'SELECT session_id FROM metis_session_leases WHERE node_id = $1 ORDER BY session_id',
    [nodeId],
  );
  return leases.rows.map((row) => row.session_id);
}

/**
 * The leases naming `nodeId`, with their fencing tokens: what a node restarting under its name held
 * before, and may write under again while no other node has taken them.
 */
export async function leaseTokensOf(
  client: pg.ClientBase | pg.Pool,
  nodeId: string,
): Promise<{ readonly sessionId: string; readonly token: number }[]> {
  const leases = await client.query<{ session_id: string; token: string }>(
    'SELECT session_id, token FROM metis_session_leases WHERE node_id = $1 ORDER BY session_id',
    [nodeId],
  );
  return leases.rows.map((row) => ({ sessionId: row.session_id, token: Number(row.token) }));
}

/**
 * Sessions leased to a node that went silent (past `nodeTimeoutMs` by the store's clock, without a
 * goodbye: killed, or cut off): free for the first live node that takes them. A node that stopped
 * cleanly closed its turns first, so its sessions wait for their next request.
 */
export async function orphanedLeases(
  client: pg.ClientBase | pg.Pool,
  nodeTimeoutMs: number,
  /**
   * Only the sessions whose last turn the store shows open (started, neither completed nor
   * cancelled): what a node that follows only some sessions cannot tell from its own copy.
   */
  openTurnOnly = false,
): Promise<string[]> {
  const leases = await client.query<{ session_id: string }>(
    `SELECT l.session_id FROM metis_session_leases l LEFT JOIN metis_nodes n ON n.node_id = l.node_id
      WHERE (n.node_id IS NULL
         OR (n.stopped_at_us IS NULL AND n.heartbeat_at_us < ${STORE_NOW_US} - $1::bigint * 1000))
        ${openTurnOnly ? `AND ${OPEN_TURN}` : ''}
      ORDER BY l.session_id`,
    [nodeTimeoutMs],
  );
  return leases.rows.map((row) => row.session_id);
}

/** SQL: the lease `l`'s session has a turn started and not ended in the store (its newest one). */
const OPEN_TURN = `EXISTS (
  SELECT 1 FROM (SELECT e.turn_id FROM events e WHERE e.session_id = l.session_id AND e.type = 'turn.started'
                  ORDER BY e.id DESC LIMIT 1) AS last_turn
   WHERE NOT EXISTS (SELECT 1 FROM events x WHERE x.session_id = l.session_id AND x.turn_id = last_turn.turn_id
                        AND x.type IN ('turn.completed', 'turn.cancelled')))`;
