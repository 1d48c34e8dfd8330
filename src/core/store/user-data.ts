import { MetisError } from '../errors.js';
import { AUDIT_EVENT_TYPES } from '../events/catalog/index.js';
import type { Db } from './database.js';
import { EVENT_COLUMNS, type EventRow } from './event-rows.js';
import { verifyBeforeDelete } from './gap-detector.js';

/**
 * One user's data in a SQLite store (bus §6.14 analytics domain: data-subject access and the right to
 * be forgotten). A user is known by the pseudonymous `user_id` a gateway key carries (multi-user §3):
 * their sessions are those with an event naming them (`turn.completed`, `llm.call_completed`), and
 * outside those, the events whose payload names them (a `quota.alert`, a key's admin events).
 */

/** The ids of the sessions an event names the user in. */
export function userSessionIds(db: Db, userId: string): string[] {
  return db
    .prepare(
      `SELECT DISTINCT session_id FROM events
       WHERE type IN ('turn.completed', 'llm.call_completed') AND json_extract(payload_json, '$.user_id') = ?`,
    )
    .pluck()
    .all(userId) as string[];
}

/** Every event of the user's sessions and every other event naming them, in id order. */
export function userEventRows(db: Db, userId: string): IterableIterator<EventRow> {
  const sessions = JSON.stringify(userSessionIds(db, userId));
  return db
    .prepare(
      `SELECT ${EVENT_COLUMNS} FROM events
       WHERE session_id IN (SELECT value FROM json_each(@sessions))
          OR json_extract(payload_json, '$.user_id') = @user
       ORDER BY id`,
    )
    .raw()
    .iterate({ sessions, user: userId }) as IterableIterator<EventRow>;
}

export interface ForgetResult {
  readonly sessions: number;
  readonly events_deleted: number;
  readonly messages_deleted: number;
  readonly tool_calls_deleted: number;
  /** Audit-typed events kept (bus §7.3: audit types outlive retention and deletion alike). */
  readonly audit_events_kept: number;
}

/**
 * Deletes what the store holds of the user, in one IMMEDIATE transaction (beside a running server, as
 * a prune does): their sessions' events but the audit types, messages, tool calls, streaming archive,
 * summaries and titles (the message search index follows its trigger), and any other non-audit event
 * naming them. Session rows stay (ids and times only), so an audit event still has its session.
 * @throws MetisError METIS_ERR_INVALID_ARGUMENT naming the sessions still open (end them first).
 */
export function forgetUser(db: Db, userId: string): ForgetResult {
  const audit = JSON.stringify([...AUDIT_EVENT_TYPES]);
  return db
    .transaction(() => {
      const sessionIds = userSessionIds(db, userId);
      const sessions = JSON.stringify(sessionIds);
      const open = db
        .prepare(`SELECT id FROM sessions WHERE status = 'active' AND id IN (SELECT value FROM json_each(?))`)
        .pluck()
        .all(sessions) as string[];
      if (open.length > 0)
        throw new MetisError(
          'METIS_ERR_INVALID_ARGUMENT',
          `user ${userId} has sessions still open: ${open.join(', ')}; end them first (metis end <session>)`,
        );
      // A later gap scan must not take the deleted stretch for a lost one.
      const upTo = new Map(
        (
          db
            .prepare(
              'SELECT session_id, max(seq) AS seq FROM events WHERE session_id IN (SELECT value FROM json_each(?)) GROUP BY session_id',
            )
            .all(sessions) as { session_id: string; seq: number }[]
        ).map((row) => [row.session_id, row.seq]),
      );
      verifyBeforeDelete(db, upTo);
      const inSessions = 'session_id IN (SELECT value FROM json_each(@sessions))';
      const notAudit = 'type NOT IN (SELECT value FROM json_each(@audit))';
      const params = { sessions, audit, user: userId };
      const kept = db
        .prepare(`SELECT count(*) FROM events WHERE ${inSessions} AND NOT (${notAudit})`)
        .pluck()
        .get(params) as number;
      const events =
        db.prepare(`DELETE FROM events WHERE ${inSessions} AND ${notAudit}`).run(params).changes +
        db
          .prepare(`DELETE FROM events WHERE json_extract(payload_json, '$.user_id') = @user AND ${notAudit}`)
          .run(params).changes;
      const messages = db.prepare(`DELETE FROM messages WHERE ${inSessions}`).run(params).changes;
      const toolCalls = db.prepare(`DELETE FROM tool_calls WHERE ${inSessions}`).run(params).changes;
      for (const table of ['stream_events', 'session_summaries', 'session_titles'])
        db.prepare(`DELETE FROM ${table} WHERE ${inSessions}`).run(params);
      return {
        sessions: sessionIds.length,
        events_deleted: events,
        messages_deleted: messages,
        tool_calls_deleted: toolCalls,
        audit_events_kept: kept,
      };
    })
    .immediate();
}
