import type { SessionStore } from './session-store.js';

/** What a walk of a delegation tree reads. */
type Lineage = Pick<SessionStore, 'getSession' | 'childSessionIds'>;

/**
 * The delegation tree of sessions (`parent_session_id`, bus §6.8): a planner's workers, and theirs.
 * A question one of them puts to the user (a tool confirmation) belongs to every session above it too:
 * whoever watches the planner is who is there to answer it (docs/decisions.md "Delegated confirmations").
 */

/** Depth bound of a walk up or down the tree: a cycle in stored rows (corruption) must not hang anything. */
export const MAX_DELEGATION_DEPTH = 64;

/** `sessionId` followed by every session that descends from it, parents before children. */
export function selfAndDescendants(sessions: Lineage, sessionId: string): string[] {
  const found = [sessionId];
  const seen = new Set(found);
  for (let i = 0; i < found.length && i < MAX_DELEGATION_DEPTH * 64; i += 1) {
    for (const child of sessions.childSessionIds(found[i]!)) {
      if (seen.has(child)) continue;
      seen.add(child);
      found.push(child);
    }
  }
  return found;
}

/** The session at the top of `sessionId`'s delegation tree (itself when it is no worker). */
export function rootSession(sessions: Lineage, sessionId: string): string {
  let current = sessionId;
  for (let depth = 0; depth <= MAX_DELEGATION_DEPTH; depth += 1) {
    const parent = sessions.getSession(current)?.parent_session_id ?? null;
    if (parent === null) return current;
    current = parent;
  }
  return current;
}

/** Whether `ancestorId` is `sessionId` itself or a session above it in the delegation tree. */
export function isSelfOrAncestor(sessions: Lineage, ancestorId: string, sessionId: string): boolean {
  let current: string | null = sessionId;
  for (let depth = 0; current !== null && depth <= MAX_DELEGATION_DEPTH; depth += 1) {
    if (current === ancestorId) return true;
    current = sessions.getSession(current)?.parent_session_id ?? null;
  }
  return false;
}
