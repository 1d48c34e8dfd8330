import type { SessionRecord, SessionStore } from './session-store.js';

/**
 * A session's row as anyone may ask for it: the routes and streams naming a session another node runs,
 * or one this process has not taken up. Asynchronous, so that a store over the network can answer
 * (docs/plans/store-port.md step 4: what a non-owner reads becomes an `await`); the runtime's own
 * sessions are answered from its memory first.
 */
export interface SessionReads {
  /** The session's stored row, or null when no session of that id is stored. */
  session(sessionId: string): Promise<SessionRecord | null>;
}

/** Over the SQLite session store, answered at the call. */
export function sqliteSessionReads(sessions: Pick<SessionStore, 'getSession'>): SessionReads {
  return { session: async (sessionId) => sessions.getSession(sessionId) };
}
