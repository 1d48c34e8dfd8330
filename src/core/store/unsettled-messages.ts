import type { MessageRecord } from './session-records.js';

/**
 * What the writer of a session's messages knows that its store may not hold yet: the messages written
 * and not committed, and when each recent one became part of the conversation (MessageMarks). A reader
 * of the store merges them in, so that it answers as the owner sees the conversation (SessionWrites
 * keeps them; SessionStore reads them synchronously, the PostgreSQL reads after their query).
 */
export interface UnsettledMessages {
  /** The session's messages written and not committed yet, in no particular order. */
  unsettledMessages(sessionId: string): MessageRecord[];
  /** Whether the message became part of the conversation with an event after `atId`. */
  shownAfter(sessionId: string, messageId: string, atId: string): boolean;
  /** How many of the session's messages became part of the conversation after `atId`. */
  countShownAfter(sessionId: string, atId: string): number;
}

const byId = (a: MessageRecord, b: MessageRecord): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/**
 * A page of stored messages (the newest `limit` before `beforeId`, oldest first) with `unsettled`
 * merged in: those before `beforeId` are added or replace the stored row of the same id, and the
 * newest `limit` are kept.
 */
export function withUnsettled(
  stored: MessageRecord[],
  unsettled: readonly MessageRecord[],
  beforeId: string | null,
  limit: number,
): MessageRecord[] {
  const pending = unsettled.filter((m) => beforeId === null || m.id < beforeId);
  if (pending.length === 0) return stored;
  const merged = new Map(stored.map((m) => [m.id, m]));
  for (const message of pending) merged.set(message.id, message);
  return [...merged.values()].sort(byId).slice(-limit);
}

/** For a reader beside no writer (a bench, a tool reading the store): the store holds everything. */
export const NO_UNSETTLED_MESSAGES: UnsettledMessages = {
  unsettledMessages: () => [],
  shownAfter: () => false,
  countShownAfter: () => 0,
};
