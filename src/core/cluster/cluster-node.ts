import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { NODE_ID_PATTERN } from '../config/schema.js';
import { MetisError } from '../errors.js';
import { postgresPool } from '../store/postgres/connect.js';
import {
  aliveNodes,
  beat,
  describeNode,
  listNodes,
  markStopped,
  type NodeLag,
  type NodeRecord,
  registerNode,
  takeRowIdBlock,
  usedInRowIdBlock,
} from '../store/postgres/node-registry.js';
import { checkOut } from '../store/postgres/pg-util.js';
import { acquireLease, leasedTo, orphanedLeases } from '../store/postgres/session-leases.js';
import { readStoredSession, type StoredSession } from '../store/postgres/session-pull.js';
import { packageVersion } from '../version.js';
import type { BrokerLifecycle } from './broker.js';

export interface ClusterTiming {
  readonly heartbeatMs: number;
  readonly nodeTimeoutMs: number;
}

/** This process as a node of a cluster: its name, its peers, and what `/healthz` says of the cluster. */
export interface ClusterNode {
  readonly nodeId: string;
  /** The other nodes alive at the last heartbeat. */
  peers(): readonly NodeRecord[];
  /**
   * Resolves once this node owns the session (a lease in the store, taken now if no live node has it).
   * @throws MetisError METIS_ERR_SESSION_ELSEWHERE naming the live node that runs it
   */
  ownSession(sessionId: string): Promise<void>;
  /** Whether this node holds the session's lease now (as far as it knows without asking the store). */
  holds(sessionId: string): boolean;
  /** Another node holds these sessions now (the store said so at a shipment): asked again next time. */
  lost(sessionIds: readonly string[]): void;
  /** Reads a session and its workers from the store, each after the seq given (session-pull.ts). */
  readSession(sessionId: string, after: ReadonlyMap<string, number>): Promise<StoredSession>;
  /**
   * For `/healthz`, which needs no token: states only, no names or addresses (a default node name holds
   * the host name), no reasons (those are logged).
   */
  health(): { broker: { state: string } };
  /**
   * Says goodbye in the store (unless changes are left unshipped: then the node goes silent, and its
   * sessions wait the node timeout) and closes the broker. Safe to call twice.
   */
  close(): Promise<void>;
}

/** Whether a process with this id runs on this host (it may be another program that took the pid). */
function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

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

function pool(url: string, max = 1): pg.Pool {
  return postgresPool(url, 'cluster', max);
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
    // The store's own check, next, names what is wrong with it.
    const listing = await listNodes(client).catch(() => ({ nodes: [] as NodeRecord[], nowUs: 0 }));
    const holder = aliveNodes(listing, timing.nodeTimeoutMs).find((node) => node.node_id === nodeId);
    // A node killed a moment ago on this host still looks alive for the node timeout: its supervisor's
    // restart must not be refused for it.
    const crashedHere = holder !== undefined && holder.host === hostname() && !processRuns(holder.pid);
    if (holder !== undefined && !crashedHere)
      throw new MetisError(
        'METIS_ERR_NODE_ID_TAKEN',
        `${setting}: node "${nodeId}" already runs: ${describeNode(holder)}`,
      );
  } finally {
    await client.end().catch(() => {});
  }
}

/** The sessions whose lease names `nodeId` (none when the store cannot say). */
export async function sessionsLeasedTo(storeUrl: string, nodeId: string): Promise<string[]> {
  const client = pool(storeUrl);
  try {
    return await leasedTo(client, nodeId);
  } finally {
    await client.end().catch(() => {});
  }
}

/** The live nodes of the store, for a refusal that names who holds it. */
export async function liveNodes(storeUrl: string, timing: ClusterTiming): Promise<NodeRecord[]> {
  const client = pool(storeUrl);
  try {
    return aliveNodes(await listNodes(client), timing.nodeTimeoutMs);
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
  /** Only its state (for `/healthz`) and its close (with the node's) are used here. */
  readonly broker: BrokerLifecycle;
  readonly timing: ClusterTiming;
  readonly logger: Logger;
  /** This node's shipping, recorded with each beat (`metis cluster status` shows it as lag). */
  readonly lag: () => NodeLag;
  /** Called with this start's block of row ids (src/core/store/row-ids.ts), before the node serves. */
  readonly rowIdBlock: (block: number, usedInStore: number | null) => void;
  /**
   * Brings a session another node ran into this node's copy (take-over.ts), read with `read`. Its
   * `whenHeld` runs once this node holds the session: the turns the take-over resumes start then.
   */
  readonly takeOver: (
    sessionId: string,
    read: (sessionId: string) => Promise<StoredSession>,
    token: number,
  ) => Promise<{ readonly whenHeld?: () => void } | undefined>;
  /**
   * Told of each lease this node is granted, with its fencing token, before anything of the session
   * runs or is taken over here, and of each it lost (token null): a writer fenced by tokens
   * (pg-writer-batch.ts `WriterFence`) keeps them.
   */
  readonly onLease?: (sessionId: string, token: number | null) => void;
  /**
   * Whether a session whose node is gone is worth taking at once, without waiting for a request (a turn
   * it left open, which clients wait to see end). Default: never.
   */
  readonly adoptable?: (sessionId: string) => boolean;
}): Promise<ClusterNode> {
  const { nodeId, broker, timing, logger } = options;
  // Two connections: a lease taken while a beat runs does not wait for it.
  const client = pool(options.storeUrl, 2);
  /** Sessions whose lease this node holds; trusted while its beats go through (see `trusted`). */
  const held = new Set<string>();
  /** When the last beat that went through was sent (its stamp is no later than this). */
  let lastBeatAt = Date.now();
  // A node whose beats have failed for half the timeout may be taken for gone by the others: it asks
  // the store again before it runs anything.
  const trusted = () => Date.now() - lastBeatAt < timing.nodeTimeoutMs / 2;
  /** When beats went through again after failing, and how long they had failed. */
  let outage = { backAt: 0, lengthMs: 0 };
  let failing = false;
  /**
   * How old a peer's last beat must be for it to count as gone. When the store itself was away (a
   * restart), no node could beat: every peer looks gone the moment it is back, and a session taken from
   * a live owner then runs on two nodes until a fence stops one. So for a node timeout after this node's
   * own outage, the outage is added: a peer counts as gone only once it had that long to beat again.
   */
  const goneAfterMs = () =>
    timing.nodeTimeoutMs + (Date.now() - outage.backAt < timing.nodeTimeoutMs ? outage.lengthMs : 0);
  let startedAtUs = 0;
  let peers: NodeRecord[] = [];
  const refreshPeers = async () => {
    peers = aliveNodes(await listNodes(client), goneAfterMs()).filter((node) => node.node_id !== nodeId);
  };
  try {
    const block = await takeRowIdBlock(client, nodeId);
    options.rowIdBlock(block, await usedInRowIdBlock(client, block));
    startedAtUs = await registerNode(client, {
      node_id: nodeId,
      url: options.url,
      host: hostname(),
      pid: process.pid,
      version: packageVersion(),
    });
    await refreshPeers();
  } catch (error) {
    await client.end().catch(() => {});
    await broker.close();
    throw error;
  }
  /** Sessions whose lease is being asked for now. */
  const asked = new Map<string, Promise<void>>();
  /** Sessions taken from another node and not yet brought in (a failed attempt is tried again). */
  const unpulled = new Set<string>();
  /** Runs `work` on a connection of the pool; a store that does not answer is named as away. */
  const withConnection = async <T>(sessionId: string, work: (connection: pg.PoolClient) => Promise<T>) => {
    let connection: Awaited<ReturnType<typeof checkOut>>;
    try {
      // checkOut listens for the connection's 'error' while it is out: a database restart must fail
      // the work, not end the process.
      connection = await checkOut(client);
    } catch (error) {
      throw storeAway(sessionId, error);
    }
    try {
      return await work(connection.client);
    } catch (error) {
      throw error instanceof MetisError ? error : storeAway(sessionId, error);
    } finally {
      connection.release();
    }
  };
  const acquire = async (sessionId: string): Promise<void> => {
    const outcome = await withConnection(sessionId, (connection) =>
      acquireLease(connection, sessionId, nodeId, goneAfterMs()),
    );
    if (!outcome.held) throw new SessionElsewhere(sessionId, outcome.owner);
    options.onLease?.(sessionId, outcome.token);
    // Another node ran it since this node did: the copy is brought up to the store's first (the
    // connection is given back before: bringing a session in writes locally, and must not hold it).
    if (outcome.taken) unpulled.add(sessionId);
    let whenHeld: (() => void) | undefined;
    if (unpulled.has(sessionId)) {
      whenHeld = (
        await options.takeOver(
          sessionId,
          (id) => withConnection(id, (connection) => readStoredSession(connection, id)),
          outcome.token,
        )
      )?.whenHeld;
      unpulled.delete(sessionId);
    }
    held.add(sessionId);
    whenHeld?.();
  };
  /**
   * Takes the sessions a gone node left with a turn open: the turn is resumed here or closed, as crash
   * recovery does at a restart (`runtime.on_restart`).
   */
  const adoptOrphans = async (adoptable: (sessionId: string) => boolean) => {
    let taken = 0;
    // This node's copy holds only the sessions it ran or its clients watched: the store says which
    // turns are open, the copy what this node committed that the store may not hold yet.
    const orphans = await orphanedLeases(client, goneAfterMs());
    if (orphans.length === 0) return;
    const openInStore = new Set(await orphanedLeases(client, goneAfterMs(), true));
    for (const sessionId of orphans) {
      // A few per beat: many sessions of a gone node are shared out among the nodes beat by beat.
      if (taken >= ADOPT_PER_BEAT) break;
      if (!openInStore.has(sessionId) && !adoptable(sessionId)) continue;
      taken += 1;
      await ownSession(sessionId).catch((error: unknown) => {
        if (!(error instanceof SessionElsewhere))
          logger.warn(
            { session_id: sessionId, err: (error as Error).message },
            'could not take an orphaned session',
          );
      });
    }
  };
  const ownSession = (sessionId: string): Promise<void> => {
    if (!trusted()) held.clear();
    if (held.has(sessionId)) return Promise.resolve();
    // One question per session at a time: a second request waits for the first's answer (and for
    // the session to be brought in), never runs on a copy that is being brought up to date.
    let asking = asked.get(sessionId);
    if (asking === undefined) {
      asking = acquire(sessionId).finally(() => asked.delete(sessionId));
      asked.set(sessionId, asking);
    }
    return asking;
  };
  let beating: Promise<void> | null = null;
  let adopting: Promise<void> | null = null;
  const timer = setInterval(() => {
    beating ??= (async () => {
      const sentAt = Date.now();
      try {
        if (await beat(client, nodeId, startedAtUs, options.lag())) {
          if (failing) outage = { backAt: Date.now(), lengthMs: Date.now() - lastBeatAt };
          failing = false;
          // Back from a silence long enough for others to count this node gone: what it held, it
          // asks the store for again (another node may have taken a session meanwhile).
          if (!trusted()) held.clear();
          lastBeatAt = sentAt;
        } else {
          // Another start took the name over: this node owns nothing any more.
          lastBeatAt = 0;
          logger.error({ node_id: nodeId }, 'another start took this node name over in the store');
        }
        await refreshPeers();
        // Beside the beat, not in it: bringing a large session in must not delay the next beat.
        const adoptable = options.adoptable;
        if (adoptable !== undefined && trusted() && adopting === null)
          adopting = adoptOrphans(adoptable).finally(() => {
            adopting = null;
          });
      } catch (error) {
        failing = true;
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
    ownSession,
    holds: (sessionId) => trusted() && held.has(sessionId),
    lost: (sessionIds) => {
      for (const sessionId of sessionIds) {
        held.delete(sessionId);
        options.onLease?.(sessionId, null);
      }
    },
    readSession: (sessionId, after) =>
      withConnection(sessionId, (connection) => readStoredSession(connection, sessionId, after)),
    health: () => ({ broker: { state: broker.state } }),
    close: () => {
      closing ??= (async () => {
        clearInterval(timer);
        await beating;
        await adopting;
        const { backlog } = options.lag();
        if (backlog > 0)
          logger.error(
            { node_id: nodeId, backlog },
            'leaving the cluster with changes not shipped: the node is left to go silent, so its sessions wait the node timeout',
          );
        else
          await markStopped(client, nodeId, startedAtUs).catch((error: unknown) =>
            logger.warn({ err: (error as Error).message }, 'could not record this node as stopped'),
          );
        await client.end().catch(() => {});
        await broker.close();
      })();
      return closing;
    },
  };
}

/** How many sessions of gone nodes one node takes per beat. */
const ADOPT_PER_BEAT = 8;

/** A session another live node runs: the request goes there (forwarded), or the client is told where. */
export class SessionElsewhere extends MetisError {
  constructor(
    readonly sessionId: string,
    readonly owner: NodeRecord,
  ) {
    super(
      'METIS_ERR_SESSION_ELSEWHERE',
      `session ${sessionId} runs on node ${describeNode(owner)}; send this request there`,
    );
  }
}

/** The store did not answer a lease question: the request is refused as any other while it is away. */
function storeAway(sessionId: string, error: unknown): MetisError {
  return new MetisError(
    'METIS_ERR_STORE_UNAVAILABLE',
    `the PostgreSQL store does not answer, so this node cannot take session ${sessionId} (${(error as Error).message})`,
    { cause: error },
  );
}
