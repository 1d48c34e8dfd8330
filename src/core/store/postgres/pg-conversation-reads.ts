import type pg from 'pg';
import type { ConversationReads } from '../conversation-reads.js';
import { type MessageRecord, type MessageRow, toMessage } from '../session-records.js';
import type { StreamReads } from '../stream-reads.js';
import { type UnsettledMessages, withUnsettled } from '../unsettled-messages.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/** A page reader of `messages`: the newest `limit` before `beforeId` (or the newest), oldest first. */
type MessagePage = (sessionId: string, beforeId: string | null, limit: number) => Promise<MessageRecord[]>;

/**
 * Pages of `messages` as the owner sees them. The unsettled messages are taken before the query and
 * again after it: one that commits while the query runs is in the rows or in the first list, and one
 * still unsettled after it is the owner's newest write of that message, so it wins over both.
 */
function messagePage(pool: pg.Pool, unsettled: UnsettledMessages): MessagePage {
  return async (sessionId, beforeId, limit) => {
    const before = unsettled.unsettledMessages(sessionId);
    // The id column is COLLATE "C": `<` and the order are SQLite's byte order. `beforeId` as a row
    // comparison, which only the (session_id, id) index can take as its bound: as `id < $3`, the
    // planner may walk the primary key back from it past every other session's messages instead.
    const result = await pool.query<MessageRow>({
      text:
        beforeId === null
          ? 'SELECT * FROM messages WHERE session_id = $1 ORDER BY id DESC LIMIT $2'
          : `SELECT * FROM messages WHERE session_id = $1 AND (session_id, id) < ($1, $3)
              ORDER BY id DESC LIMIT $2`,
      values: beforeId === null ? [sessionId, limit] : [sessionId, limit, beforeId],
      types: BIGINT_AS_NUMBER,
    });
    const stored = result.rows.reverse().map(toMessage);
    const after = unsettled.unsettledMessages(sessionId);
    return withUnsettled(stored, before.length === 0 ? after : [...before, ...after], beforeId, limit);
  };
}

/**
 * A session's conversation read from PostgreSQL (docs/plans/store-port.md step 8), for a server with no
 * working copy: the rows committed, with the messages `unsettled` (the runtime's WriteOnlySessionRows)
 * wrote and PostgreSQL has not committed yet merged in. The answers are sqliteConversationReads' for
 * the same rows and writes.
 */
export function pgConversationReads(pool: pg.Pool, unsettled: UnsettledMessages): ConversationReads {
  const page = messagePage(pool, unsettled);
  return {
    messages: (sessionId, { beforeId, limit }) => page(sessionId, beforeId ?? null, limit),

    async hasMessage(sessionId, messageId) {
      if (unsettled.unsettledMessages(sessionId).some((m) => m.id === messageId)) return true;
      const result = await pool.query('SELECT 1 FROM messages WHERE id = $1 AND session_id = $2', [
        messageId,
        sessionId,
      ]);
      return result.rowCount !== null && result.rowCount > 0;
    },
  };
}

/**
 * `StreamReads.messagesAsOf` over PostgreSQL: the newest `limit` messages as a snapshot taken as of
 * event `atId` shows them, as SessionStore.messagesAsOf answers on SQLite: the page is widened by the
 * messages marked after `atId` (message-marks.ts) and those are left out. A message marked while the
 * query ran would leave the page short, so it is read once more, wider.
 */
export function pgMessagesAsOf(pool: pg.Pool, unsettled: UnsettledMessages): StreamReads['messagesAsOf'] {
  const page = messagePage(pool, unsettled);
  return async (sessionId, atId, limit) => {
    let later = unsettled.countShownAfter(sessionId, atId);
    let messages = await page(sessionId, null, limit + later);
    const laterNow = unsettled.countShownAfter(sessionId, atId);
    if (laterNow > later) {
      later = laterNow;
      messages = await page(sessionId, null, limit + later);
    }
    return later === 0
      ? messages
      : messages.filter((m) => !unsettled.shownAfter(sessionId, m.id, atId)).slice(-limit);
  };
}
