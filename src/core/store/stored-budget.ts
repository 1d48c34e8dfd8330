import type { BudgetRows, Spent, StoredCaps } from './budget-rows.js';
import { rootSession } from './session-lineage.js';
import type { SessionRows } from './store-port.js';

/**
 * A session's budget as the store holds it, for a node that does not run the session (its snapshot
 * shows the budget as the owner's does): the caps set by request on it and on its family's root, and
 * what it and the whole family spent as counted so far.
 */
export interface StoredBudget {
  readonly root: string;
  readonly isWorker: boolean;
  readonly caps: StoredCaps | null;
  readonly rootCaps: StoredCaps | null;
  readonly own: Spent;
  readonly tree: Spent;
}

/**
 * One statement (PostgreSQL's placeholders: `$1` the session, `$2` the depth bound): up the parents to
 * the root, down from the root for the family's spend. No row when the session is not stored.
 */
export const STORED_BUDGET_SQL = `WITH RECURSIVE up (id, parent_session_id, depth) AS (
    SELECT id, parent_session_id, 0 FROM sessions WHERE id = $1
    UNION ALL
    SELECT s.id, s.parent_session_id, u.depth + 1 FROM sessions s JOIN up u ON s.id = u.parent_session_id
     WHERE u.depth < $2),
  root AS (SELECT id FROM up ORDER BY depth DESC LIMIT 1),
  down (id, depth) AS (
    SELECT id, 0 FROM root
    UNION ALL
    SELECT s.id, d.depth + 1 FROM sessions s JOIN down d ON s.parent_session_id = d.id WHERE d.depth < $2)
  SELECT r.id AS root, me.parent_session_id IS NOT NULL AS is_worker, me.budget_caps_json AS caps,
         rs.budget_caps_json AS root_caps, me.spent_usd AS own_usd, me.spent_tokens AS own_tokens,
         (SELECT coalesce(sum(spent_usd), 0) FROM sessions WHERE id IN (SELECT DISTINCT id FROM down)) AS tree_usd,
         (SELECT coalesce(sum(spent_tokens), 0) FROM sessions WHERE id IN (SELECT DISTINCT id FROM down)) AS tree_tokens
    FROM sessions me, root r JOIN sessions rs ON rs.id = r.id
   WHERE me.id = $1`;

/** A row of STORED_BUDGET_SQL as the budget it describes. */
export function storedBudgetOfRow(row: {
  root: string;
  is_worker: boolean;
  caps: string | null;
  root_caps: string | null;
  own_usd: number | string;
  own_tokens: number | string;
  tree_usd: number | string;
  tree_tokens: number | string;
}): StoredBudget {
  return {
    root: row.root,
    isWorker: row.is_worker,
    caps: row.caps === null ? null : (JSON.parse(row.caps) as StoredCaps),
    rootCaps: row.root_caps === null ? null : (JSON.parse(row.root_caps) as StoredCaps),
    own: { usd: Number(row.own_usd), tokens: Number(row.own_tokens) },
    tree: { usd: Number(row.tree_usd), tokens: Number(row.tree_tokens) },
  };
}

/** The same, over the SQLite store's rows (answered at the call). */
export function sqliteStoredBudget(
  sessions: Pick<SessionRows, 'getSession' | 'childSessionIds'>,
  budgets: BudgetRows,
  sessionId: string,
): StoredBudget | null {
  const row = sessions.getSession(sessionId);
  if (row === null) return null;
  const root = rootSession(sessions, sessionId);
  return {
    root,
    isWorker: row.parent_session_id !== null,
    caps: budgets.capsOf(sessionId),
    rootCaps: budgets.capsOf(root),
    own: budgets.spentBy(sessionId),
    tree: budgets.spentByTree(root),
  };
}
