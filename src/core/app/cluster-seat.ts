import type { JoinedNode } from '../cluster/cluster-start.js';
import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import type { SessionGate, SessionRouter } from '../http/session-router.js';
import type { Runtime } from '../runtime/runtime.js';
import { MAX_DELEGATION_DEPTH, rootSession } from '../store/session-lineage.js';
import type { SessionReads } from '../store/session-reads.js';
import type { SessionRows } from '../store/store-port.js';
import { SyncReadRefused } from '../store/write-only-session-rows.js';

/** Sessions whose root `rootOf` remembers at most. */
const MAX_REMEMBERED_ROOTS = 10_000;

/**
 * This node's place in its cluster, as the runtime and the server ask about it: which sessions it
 * runs, and the gate a request naming a session passes. On a single node every session runs here.
 */
export class ClusterSeat {
  private joinedNode: JoinedNode | null = null;

  /** The joined node; null before the join (and always on a single node). */
  get node(): JoinedNode | null {
    return this.joinedNode;
  }

  /** Set once the node has joined: the sessions watched meanwhile are followed from then on. */
  set node(node: JoinedNode | null) {
    this.joinedNode = node;
    if (node !== null) for (const start of this.pendingWatches.splice(0)) start(node);
  }

  /**
   * @param reads where a session's parent is read when the rows refuse a synchronous read (PostgreSQL
   *   alone): `resolveRoot` reads it there, and `rootOf` answers from what was resolved or learnt.
   */
  constructor(
    readonly clustered: boolean,
    private readonly sessions: SessionRows,
    private readonly reads?: Pick<SessionReads, 'session'>,
  ) {}

  /**
   * Roots already read: the fan-out asks for every delta it publishes, the mirror for every event it
   * receives, and a session's parent never changes once its row exists. Bounded by clearing.
   */
  private readonly roots = new Map<string, string>();

  /**
   * The session a worker's delegations descend from: the one leased for the whole family. Where the rows
   * refuse a synchronous read, a session neither resolved (`resolveRoot`) nor learnt (`learnRoots`) is
   * answered as its own root, not remembered: every way in for a request resolves it first.
   */
  rootOf(sessionId: string): string {
    const known = this.roots.get(sessionId);
    if (known !== undefined) return known;
    try {
      const root = rootSession(this.sessions, sessionId);
      // A session not stored here yet may still get a parent when its row arrives: not remembered.
      if (root !== sessionId || this.sessions.getSession(sessionId) !== null) this.remember(sessionId, root);
      return root;
    } catch (error) {
      if (error instanceof SyncReadRefused) return sessionId;
      throw error;
    }
  }

  /** The root of a session as the store says it, remembered (a parent never changes once stored). */
  async resolveRoot(sessionId: string): Promise<string> {
    const known = this.roots.get(sessionId);
    if (known !== undefined || this.reads === undefined) return known ?? this.rootOf(sessionId);
    let current = sessionId;
    for (let depth = 0; depth <= MAX_DELEGATION_DEPTH; depth += 1) {
      const remembered = this.roots.get(current);
      if (remembered !== undefined) {
        current = remembered;
        break;
      }
      const row = await this.reads.session(current);
      // Not stored (yet): its parent is not known, so nothing is remembered.
      if (row === null) return current === sessionId ? sessionId : current;
      if (row.parent_session_id === null) break;
      current = row.parent_session_id;
    }
    this.remember(sessionId, current);
    return current;
  }

  /**
   * Learns each worker's root as its planner delegates to it (`delegate.started` comes before anything
   * of the worker), so the worker's events are placed without a read. Returns the function that stops.
   */
  learnRoots(bus: { onEmit(listener: (event: MetisEvent) => void): () => void }): () => void {
    return bus.onEmit((event) => {
      if (event.type !== 'delegate.started') return;
      const worker = (event.payload as { worker_session_id: string }).worker_session_id;
      this.remember(worker, this.rootOf(event.session_id));
    });
  }

  private remember(sessionId: string, root: string): void {
    if (this.roots.size >= MAX_REMEMBERED_ROOTS) this.roots.clear();
    this.roots.set(sessionId, root);
  }

  /** Whether this node runs the session: it holds the lease of its family's root. */
  runsHere(sessionId: string): boolean {
    if (!this.clustered) return true;
    if (this.node === null) return false;
    return this.node.holds(this.rootOf(sessionId));
  }

  /** The session router the server asks: the gate, the read, the forward, the streams' requests. */
  router(runtime: Runtime): SessionRouter {
    const gate = this.sessionGate(runtime);
    return {
      gate,
      read: async (sessionId) => {
        if (!this.clustered) return;
        await this.resolveRoot(sessionId);
        if (this.node !== null) await this.node.refresh(sessionId);
      },
      forward: async (refusal, request) =>
        this.node === null ? null : this.node.forwardRefused(refusal, request),
      watch: this.clustered ? (sessionId) => this.watch(sessionId) : undefined,
      runElsewhere: this.runElsewhere(gate),
    };
  }

  /** A client of this node watches the session: followed over the broker until the function returned. */
  private watch(sessionId: string): () => void {
    if (this.node !== null) return this.node.watch(sessionId);
    // A stream opened while the node still joins (the server listens first) is followed once it has.
    let unwatch: (() => void) | null = null;
    let left = false;
    this.pendingWatches.push((node) => {
      if (!left) unwatch = node.watch(sessionId);
    });
    return () => {
      left = true;
      unwatch?.();
    };
  }

  /** What the watches made before the join do once the node has joined. */
  private readonly pendingWatches: ((node: JoinedNode) => void)[] = [];

  /** Lets a request naming a session through when this node owns it (taking the lease if free). */
  private sessionGate(runtime: Runtime): SessionGate {
    return async (sessionId, creating = false) => {
      // The session the request acts on runs from memory (runtime.open), loaded once it is this node's.
      if (!this.clustered) return runtime.open(sessionId);
      const node = this.node;
      if (node === null)
        throw new MetisError(
          'METIS_ERR_STORE_UNAVAILABLE',
          'this node is still joining its cluster; try again in a moment',
        );
      // A turn running here was let in by the gate: this node owns the session (a cancel or an answer to
      // a confirmation needs no store, which may be away).
      if (runtime.currentTurn(sessionId) !== null) return;
      // Unknown here and not being made (a route naming its session in the body makes it): the route
      // answers 404, and no lease is taken for an id nobody made.
      if (!creating && !(await runtime.knowsSession(sessionId))) {
        // Made on another node a moment ago, and not mirrored here yet?
        await node.refresh(sessionId);
        if (!(await runtime.knowsSession(sessionId))) return;
      }
      await node.ownSession(await this.resolveRoot(sessionId));
      await runtime.open(sessionId);
    };
  }

  /** A cancel frame on a stream of this node for a session another node runs goes there. */
  private runElsewhere(gate: SessionGate): SessionRouter['runElsewhere'] {
    if (!this.clustered) return undefined;
    return async (sessionId, request) => {
      if (this.runsHere(sessionId)) return null;
      try {
        await gate(sessionId);
        return null;
      } catch (refusal) {
        const answer =
          this.node === null ? null : await this.node.forwardRefused(refusal, { ...request, headers: {} });
        if (answer === null) throw refusal;
        return answer;
      }
    };
  }
}
