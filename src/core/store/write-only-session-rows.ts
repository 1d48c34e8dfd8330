import type { ConfirmationRequest } from '../confirmation-request.js';
import type { MessageRecord, SessionRecord, ToolCallRecord } from './session-records.js';
import { SessionWrites } from './session-writes.js';
import type { SessionRows } from './store-port.js';

/** A synchronous read of session rows a store over the network cannot answer (the read named). */
export class SyncReadRefused extends Error {
  constructor(readonly read: string) {
    super(
      `${read}: this store is read asynchronously; the owner answers the sessions it holds from memory (runtime.open), others through SessionReads`,
    );
    this.name = 'SyncReadRefused';
  }
}

/**
 * The session rows of a store that answers reads only asynchronously (PostgreSQL with no working copy,
 * docs/plans/store-port.md step 8): every write goes to the sink as SessionStore's do, and every
 * synchronous read is refused. The runtime wraps them in OwnerRows, which answers the sessions it holds
 * from memory, so a read reaching these rows is a session read before `runtime.open` loaded it.
 * The messages they hold until committed (UnsettledMessages) are what the PostgreSQL reads merge in:
 * pass this instance to pgConversationReads and pgStreamReads.
 */
export class WriteOnlySessionRows extends SessionWrites implements SessionRows {
  /** Refuses a read (a subclass may note it first: test/runtime/owner-memory lists them). */
  protected refuse(read: string): never {
    throw new SyncReadRefused(read);
  }

  getSession(id: string): SessionRecord | null {
    return this.refuse(`getSession(${id})`);
  }

  listSessions(limit?: number): SessionRecord[] {
    return this.refuse(`listSessions(${limit})`);
  }

  childSessionIds(parentId: string): string[] {
    return this.refuse(`childSessionIds(${parentId})`);
  }

  lastEventId(sessionId: string): string | null {
    return this.refuse(`lastEventId(${sessionId})`);
  }

  storedCost(sessionId: string): number {
    return this.refuse(`storedCost(${sessionId})`);
  }

  turnCount(sessionId: string): number {
    return this.refuse(`turnCount(${sessionId})`);
  }

  unansweredConfirmations(sessionIds: readonly string[]): ConfirmationRequest[] {
    return this.refuse(`unansweredConfirmations(${sessionIds.join(',')})`);
  }

  turnState(sessionId: string): { turnCount: number; currentTurnId: string | null } {
    return this.refuse(`turnState(${sessionId})`);
  }

  hasTurn(sessionId: string, turnId: string): boolean {
    return this.refuse(`hasTurn(${sessionId}, ${turnId})`);
  }

  hasMessage(sessionId: string, messageId: string): boolean {
    return this.refuse(`hasMessage(${sessionId}, ${messageId})`);
  }

  messages(sessionId: string, _options?: { beforeId?: string | null; limit?: number }): MessageRecord[] {
    return this.refuse(`messages(${sessionId})`);
  }

  messagesAsOf(sessionId: string, atId: string, _limit: number): MessageRecord[] {
    return this.refuse(`messagesAsOf(${sessionId}, ${atId})`);
  }

  toolCall(id: string, sessionId?: string): ToolCallRecord | null {
    return this.refuse(`toolCall(${id}, ${sessionId})`);
  }
}
