import type { BudgetRows, Spent, StoredCaps } from '../store/budget-rows.js';
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

/** The store port as the owner runs on it: its sessions' rows and budgets answered from memory. */
export function ownerStorePort(store: StorePort): StorePort & { readonly sessions: OwnerRows } {
  const sessions = new OwnerRows(store.sessions);
  return { ...store, sessions, budgets: new OwnerBudgetRows(store.budgets, sessions) };
}
