import type { BudgetRows, Spent, StoredCaps } from '../store/budget-rows.js';
import type { QueueRows, StoredQueue } from '../store/queue-rows.js';
import type { StorePort } from '../store/store-port.js';
import { OwnerRows } from './owner-rows.js';

/**
 * The budget rows as the owner sees them (store-port.md step 4): caps and spend of the sessions
 * OwnerRows holds come from their family's load and follow this process's writes; others are read
 * from the store. Budgets keeps the live figures once read, so this answers each session's first read.
 */
export class OwnerBudgetRows implements BudgetRows {
  constructor(
    private readonly store: BudgetRows,
    private readonly owner: OwnerRows,
  ) {}

  capsOf(sessionId: string): StoredCaps | null {
    const held = this.owner.heldBudget(sessionId);
    return held === undefined ? this.store.capsOf(sessionId) : held.caps;
  }

  spentBy(sessionId: string): Spent {
    const held = this.owner.heldBudget(sessionId);
    return held === undefined ? this.store.spentBy(sessionId) : { ...held.spent };
  }

  spentByTree(rootSessionId: string): Spent {
    const tree = this.owner.heldTree(rootSessionId);
    if (tree === null) return this.store.spentByTree(rootSessionId);
    const sum = { usd: 0, tokens: 0 };
    for (const id of tree) {
      const { spent } = this.owner.heldBudget(id)!;
      sum.usd += spent.usd;
      sum.tokens += spent.tokens;
    }
    return sum;
  }

  setCaps(sessionId: string, caps: StoredCaps): void {
    this.store.setCaps(sessionId, caps);
    const held = this.owner.heldBudget(sessionId);
    if (held !== undefined) held.caps = caps;
  }

  addSpend(sessionId: string, spent: Spent): void {
    this.store.addSpend(sessionId, spent);
    const held = this.owner.heldBudget(sessionId);
    if (held === undefined) return;
    held.spent.usd += spent.usd;
    held.spent.tokens += spent.tokens;
  }
}

/**
 * The queue rows as the owner sees them: a held session's queued messages come from its family's load
 * and follow this process's writes (what a restart or a take-over restores); others are read from the
 * store, as is the list of queued sessions a start takes up.
 */
export class OwnerQueueRows implements QueueRows {
  constructor(
    private readonly store: QueueRows,
    private readonly owner: OwnerRows,
  ) {}

  queueOf(sessionId: string): StoredQueue | null {
    const held = this.owner.heldQueue(sessionId);
    return held === undefined ? this.store.queueOf(sessionId) : held.queue;
  }

  setQueue(sessionId: string, queue: StoredQueue | null): void {
    this.store.setQueue(sessionId, queue);
    const held = this.owner.heldQueue(sessionId);
    if (held !== undefined) held.queue = queue;
  }

  queuedSessions(): string[] {
    return this.store.queuedSessions();
  }
}

/** The store port as the owner runs on it: its sessions' rows, budgets and queues answered from memory. */
export function ownerStorePort(store: StorePort): StorePort & { readonly sessions: OwnerRows } {
  const sessions = new OwnerRows(store.sessions);
  return {
    ...store,
    sessions,
    budgets: new OwnerBudgetRows(store.budgets, sessions),
    queues: new OwnerQueueRows(store.queues, sessions),
  };
}
