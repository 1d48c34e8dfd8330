import { type BudgetRows, capsWrite, type Spent, type StoredCaps, spendWrite } from './budget-rows.js';
import { type QueueRows, queueWrite, type StoredQueue } from './queue-rows.js';
import type { RowSink } from './session-writes.js';
import { SyncReadRefused } from './write-only-session-rows.js';

/**
 * The budget rows of a store read only asynchronously (store-port plan step 8): caps and spend are
 * written to the sink as SQLite's are, and read from the owner's memory of the sessions it holds
 * (OwnerBudgetRows, from their family's load); a read reaching these rows is refused.
 */
export class WriteOnlyBudgetRows implements BudgetRows {
  constructor(private readonly sink: RowSink) {}

  capsOf(sessionId: string): StoredCaps | null {
    throw new SyncReadRefused(`capsOf(${sessionId})`);
  }

  spentBy(sessionId: string): Spent {
    throw new SyncReadRefused(`spentBy(${sessionId})`);
  }

  spentByTree(rootSessionId: string): Spent {
    throw new SyncReadRefused(`spentByTree(${rootSessionId})`);
  }

  setCaps(sessionId: string, caps: StoredCaps): void {
    this.sink.write(capsWrite(sessionId, caps));
  }

  addSpend(sessionId: string, spent: Spent): void {
    this.sink.write(spendWrite(sessionId, spent));
  }
}

/**
 * The queue rows of a store read only asynchronously: a held session's queue comes from its load
 * (OwnerQueueRows), the sessions with something queued were read when the store was opened (a start
 * takes them up once), and writes go to the sink.
 */
export class WriteOnlyQueueRows implements QueueRows {
  constructor(
    private readonly sink: RowSink,
    private readonly queuedAtOpen: readonly string[],
  ) {}

  queueOf(sessionId: string): StoredQueue | null {
    throw new SyncReadRefused(`queueOf(${sessionId})`);
  }

  setQueue(sessionId: string, queue: StoredQueue | null): void {
    this.sink.write(queueWrite(sessionId, queue));
  }

  queuedSessions(): string[] {
    return [...this.queuedAtOpen];
  }
}
