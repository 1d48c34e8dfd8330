import type { MessageRecord, SessionStore } from './session-store.js';

/**
 * A session's stored conversation, as routes read it for any session (a page of messages, whether a
 * message is one of the session's). Asynchronous, so that a store over the network can answer
 * (docs/plans/store-port.md step 3); what the runtime reads of the sessions it runs, in the middle of
 * a turn, stays with the runtime (its own memory, step 4).
 */
export interface ConversationReads {
  /** The newest `limit` messages before `beforeId` (or the newest overall), oldest first. */
  messages(
    sessionId: string,
    page: { readonly beforeId?: string | null; readonly limit: number },
  ): Promise<MessageRecord[]>;
  /** Whether `messageId` is a stored message of this session. */
  hasMessage(sessionId: string, messageId: string): Promise<boolean>;
}

/**
 * Over the SQLite session store the runtime writes through: its messages still waiting for their
 * commit are merged in, as the runtime sees them. Answered at the call.
 */
export function sqliteConversationReads(
  sessions: Pick<SessionStore, 'messages' | 'hasMessage'>,
): ConversationReads {
  return {
    messages: async (sessionId, page) => sessions.messages(sessionId, page),
    hasMessage: async (sessionId, messageId) => sessions.hasMessage(sessionId, messageId),
  };
}
