import { toSessionRecord } from './family-state.js';
import type { SessionRecord, SessionStore } from './session-store.js';

/** A session as its stored events and row show it: what a read of a session not run here answers. */
export interface StoredSessionSummary {
  readonly row: SessionRecord;
  /** One per stored `turn.started`. */
  readonly turnCount: number;
  /** The turn started and not ended, as the newest turn edge says; null when none is open. */
  readonly currentTurnId: string | null;
  /** Its model calls' cost plus its workers' rolled-up spend, unrounded. */
  readonly storedCost: number;
}

/**
 * A session's row as anyone may ask for it: the routes and streams naming a session another node runs,
 * or one this process has not taken up. Asynchronous, so that a store over the network can answer
 * (docs/plans/store-port.md step 4: what a non-owner reads becomes an `await`); the runtime's own
 * sessions are answered from its memory first.
 */
export interface SessionReads {
  /** The session's stored row, or null when no session of that id is stored. */
  session(sessionId: string): Promise<SessionRecord | null>;
  /** The row with its turn state and cost, read at one point of the store; null when not stored. */
  summary(sessionId: string): Promise<StoredSessionSummary | null>;
}

/** Over the SQLite session store, answered at the call. */
export function sqliteSessionReads(
  sessions: Pick<SessionStore, 'getSession' | 'turnState' | 'storedCost'>,
): SessionReads {
  return {
    session: async (sessionId) => sessions.getSession(sessionId),
    summary: async (sessionId) => {
      const row = sessions.getSession(sessionId);
      if (row === null) return null;
      return {
        row: toSessionRecord(row),
        ...sessions.turnState(sessionId),
        storedCost: sessions.storedCost(sessionId),
      };
    },
  };
}
