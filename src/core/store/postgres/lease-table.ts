import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import type { WriterFence } from './pg-writer-batch.js';

/**
 * The token of a family this node does not hold (never took, or lost). Lease tokens come from the
 * sequence `metis_lease_tokens`, which starts at 1, so no lease row carries it and the store's fence
 * refuses the write (metis_hold_leases): a node never writes into a family it cannot prove it holds.
 */
export const NO_LEASE_TOKEN = 0;

/** Told of the family roots this node learned it lost (their writes were refused by the fence). */
export type LeaseLostListener = (roots: readonly string[]) => void;

/**
 * The leases a cluster node holds on PostgreSQL alone, as its writer's fence needs them
 * (docs/plans/store-port.md §4): family root → lease token, set when the node acquires a lease
 * (`acquireLease` answers the token) and removed when the fence says it is lost. A session's writes
 * depend on its family's root: the members a take-over loaded are remembered with their root; any
 * other session (a worker created here since) is placed by `rootOf`, asked of the runtime's memory.
 */
export class LeaseTable {
  private readonly tokens = new Map<string, number>();
  /** Sessions placed by a take-over's load, before the runtime holds them: session → root. */
  private readonly members = new Map<string, string>();
  private readonly listeners = new Set<LeaseLostListener>();

  constructor(
    /**
     * The root of a session's family, from memory (null: not known here). Asked inside the writer's
     * commit, so it must answer synchronously; a throw counts as not known.
     */
    private readonly rootOf: (sessionId: string) => string | null,
  ) {}

  /**
   * This node holds `root`'s lease with `token` (new at every change of owner). `members` are the
   * family's sessions as the store has them, placed under `root` before the runtime loads them.
   */
  hold(root: string, token: number, members: readonly string[] = []): void {
    this.tokens.set(root, token);
    for (const member of members) this.members.set(member, root);
  }

  /** The token this node holds `root` with, or undefined when it does not hold it. */
  tokenOf(root: string): number | undefined {
    return this.tokens.get(root);
  }

  /** Forgets the leases of `roots` (lost, or let go): their families' next writes are fenced. */
  lose(roots: readonly string[]): void {
    const lost = new Set(roots);
    for (const root of lost) this.tokens.delete(root);
    for (const [member, root] of this.members) if (lost.has(root)) this.members.delete(member);
  }

  /**
   * Listens for the roots this node learns it lost (the fence refused a write of theirs), each once:
   * they are already forgotten when the listener hears.
   */
  onLost(listener: LeaseLostListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * The lease a session's writes depend on. `system` has none (every node writes it). A session whose
   * family is not held here carries NO_LEASE_TOKEN under the root found, or itself when none is: the
   * store refuses it rather than let a write whose family this node cannot name through unchecked.
   */
  leaseOf(sessionId: string): { readonly root: string; readonly token: number } | null {
    if (sessionId === SYSTEM_SESSION_ID) return null;
    const root = this.members.get(sessionId) ?? this.placed(sessionId) ?? sessionId;
    return { root, token: this.tokens.get(root) ?? NO_LEASE_TOKEN };
  }

  /** The writer's fence for node `nodeId`: refused roots are forgotten, then listeners told of the held ones. */
  fence(nodeId: string): WriterFence {
    return {
      nodeId,
      leaseOf: (sessionId) => this.leaseOf(sessionId),
      onFenced: (roots) => {
        // A family already lost is refused again at each later write of it: that is no news.
        const lost = roots.filter((root) => this.tokens.has(root));
        this.lose(roots);
        if (lost.length > 0) for (const listener of this.listeners) listener(lost);
      },
    };
  }

  private placed(sessionId: string): string | null {
    try {
      return this.rootOf(sessionId);
    } catch {
      // A memory that refuses the read (a session not held) places nothing: fenced as unknown.
      return null;
    }
  }
}
