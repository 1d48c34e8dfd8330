import type Database from 'better-sqlite3';
import type { BudgetCaps } from '../config/runtime-schema.js';
import type { Db } from './database.js';
import { type RowWrite, writeRow } from './trace-writer.js';

type Statement = Database.Statement<unknown[]>;

/** The caps a request set on a session: its own, and its delegation tree's. */
export interface StoredCaps {
  readonly session: BudgetCaps;
  readonly tree: BudgetCaps;
}

export interface Spent {
  readonly usd: number;
  readonly tokens: number;
}

/**
 * A session's budget as the store keeps it (issue 31, schema version 8): the caps set by request, and
 * the spend counted so far. Budgets (runtime/budget.ts) keeps the live figures; these rows are what it
 * starts from after a restart, a take-over or a copy.
 */
export interface BudgetRows {
  /** The caps a request set; null when none was (the configured ones apply). */
  capsOf(sessionId: string): StoredCaps | null;
  spentBy(sessionId: string): Spent;
  /** What the session and every worker under it spent. */
  spentByTree(rootSessionId: string): Spent;
  setCaps(sessionId: string, caps: StoredCaps): void;
  addSpend(sessionId: string, spent: Spent): void;
}

const NONE: Spent = { usd: 0, tokens: 0 };

export class SqliteBudgetRows implements BudgetRows {
  private readonly caps: Statement;
  private readonly spent: Statement;
  private readonly treeSpent: Statement;

  constructor(private readonly db: Db) {
    this.caps = db.prepare('SELECT budget_caps_json FROM sessions WHERE id = ?').pluck();
    this.spent = db.prepare('SELECT spent_usd AS usd, spent_tokens AS tokens FROM sessions WHERE id = ?');
    this.treeSpent = db.prepare(
      `WITH RECURSIVE tree(id) AS (
         SELECT id FROM sessions WHERE id = ?
         UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_session_id = t.id)
       SELECT coalesce(sum(spent_usd), 0) AS usd, coalesce(sum(spent_tokens), 0) AS tokens
         FROM sessions WHERE id IN (SELECT id FROM tree)`,
    );
  }

  capsOf(sessionId: string): StoredCaps | null {
    const json = this.caps.get(sessionId) as string | null | undefined;
    return json === null || json === undefined ? null : (JSON.parse(json) as StoredCaps);
  }

  spentBy(sessionId: string): Spent {
    return (this.spent.get(sessionId) as Spent | undefined) ?? NONE;
  }

  spentByTree(rootSessionId: string): Spent {
    return (this.treeSpent.get(rootSessionId) as Spent | undefined) ?? NONE;
  }

  setCaps(sessionId: string, caps: StoredCaps): void {
    writeRow(this.db, capsWrite(sessionId, caps));
  }

  addSpend(sessionId: string, spent: Spent): void {
    writeRow(this.db, spendWrite(sessionId, spent));
  }
}

/** The row write that sets a session's caps, on any store. */
export function capsWrite(sessionId: string, caps: StoredCaps): RowWrite {
  return {
    what: `budget caps of ${sessionId}`,
    change: { kind: 'budget.caps', sessionId, capsJson: JSON.stringify(caps) },
  };
}

/** The row write that adds to a session's spend, on any store. */
export function spendWrite(sessionId: string, spent: Spent): RowWrite {
  return {
    what: `budget spend of ${sessionId}`,
    // Added by the statement, not computed here: rows queued before it may not have committed yet.
    change: { kind: 'budget.spend', sessionId, usd: spent.usd, tokens: spent.tokens },
  };
}
