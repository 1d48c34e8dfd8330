/**
 * Migration 7 (issue 30): what the searchable session list reads, kept by the database itself.
 *
 * - `session_summaries`: one row per session with the figures the list filters and sorts on (model,
 *   tokens, cost, turns, the last turn's status, the first user message, the conformance mark, the
 *   latency histogram of its model calls: latency-bins.ts). Triggers on `events` and `messages` keep it
 *   in the transaction that stores the event, so no writer changes and a page never aggregates the
 *   events table (≤ 200 ms on 1,000,000 events). Derived: `store copy` does not carry it, the
 *   destination's triggers rebuild it as rows arrive.
 * - `session_titles`: the title a user set (`PATCH /sessions/{id}`). The catalog is closed, so a title
 *   is not an event; it is the user's data, not derived.
 * - `message_search`: a contentless FTS5 index of the text blocks of user and assistant messages, keyed
 *   by the message's rowid, for `GET /sessions?q=`.
 * - the hourly usage rollup of `GET /stats/usage` (usage-rollup-schema.ts).
 *
 * A turn counts as failed as the dashboard and `send --follow` see it: `turn.completed` whose
 * `signals_extra.failure` is set, that made no model call, or whose last model call failed.
 */

/** The joined text blocks of a `content_json` column (the message's readable text). */
const textOf = (column: string): string =>
  // CASE guards every step (a trigger that errs would refuse the write it rides on).
  `(SELECT group_concat(CASE WHEN block.type = 'object' THEN json_extract(block.value, '$.text') END, ' ')
      FROM json_each(CASE WHEN json_valid(${column}) THEN ${column} ELSE '[]' END) AS block
     WHERE (CASE WHEN block.type = 'object' THEN json_extract(block.value, '$.type') END) = 'text')`;

/** The model `metis conformance run` creates its sessions with (client/conformance/context.ts). */
export const CONFORMANCE_MARK_MODEL = 'scripted:conformance';

import { addToHistogram, binOf } from './latency-bins.js';
import { USAGE_ROLLUP_MIGRATION } from './usage-rollup-schema.js';

const ensureRow =
  'INSERT INTO session_summaries (session_id) VALUES (NEW.session_id) ON CONFLICT DO NOTHING;';

export const SESSION_INDEX_MIGRATION = `
  CREATE TABLE IF NOT EXISTS session_summaries (
    session_id TEXT PRIMARY KEY,
    first_message TEXT,
    model TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    turn_count INTEGER NOT NULL DEFAULT 0,
    last_turn_status TEXT,
    last_call_failed INTEGER NOT NULL DEFAULT 0,
    conformance INTEGER NOT NULL DEFAULT 0,
    latency_bins TEXT
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS session_titles (
    session_id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    set_at_us INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS idx_sessions_created ON sessions(created_at_us, id);
  CREATE VIRTUAL TABLE IF NOT EXISTS message_search USING fts5(
    body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
  );

  CREATE TRIGGER IF NOT EXISTS summary_session_created AFTER INSERT ON events
  WHEN NEW.type = 'session.created' BEGIN
    ${ensureRow}
    UPDATE session_summaries SET conformance = (
      coalesce(json_extract(NEW.payload_json, '$.initial_active_model') = '${CONFORMANCE_MARK_MODEL}', 0)
      OR coalesce((SELECT parent.conformance FROM sessions
                     JOIN session_summaries AS parent ON parent.session_id = sessions.parent_session_id
                    WHERE sessions.id = NEW.session_id), 0)
    ) WHERE session_id = NEW.session_id;
  END;
  CREATE TRIGGER IF NOT EXISTS summary_turn_started AFTER INSERT ON events
  WHEN NEW.type = 'turn.started' BEGIN
    ${ensureRow}
    UPDATE session_summaries
       SET turn_count = turn_count + 1, last_turn_status = 'running', last_call_failed = 0
     WHERE session_id = NEW.session_id;
  END;
  CREATE TRIGGER IF NOT EXISTS summary_turn_cancelled AFTER INSERT ON events
  WHEN NEW.type = 'turn.cancelled' BEGIN
    ${ensureRow}
    UPDATE session_summaries SET last_turn_status = 'cancelled' WHERE session_id = NEW.session_id;
  END;
  CREATE TRIGGER IF NOT EXISTS summary_turn_completed AFTER INSERT ON events
  WHEN NEW.type = 'turn.completed' BEGIN
    ${ensureRow}
    UPDATE session_summaries SET last_turn_status = CASE
        WHEN last_call_failed = 1
          OR json_type(NEW.payload_json, '$.signals_extra.failure') = 'text'
          OR json_extract(NEW.payload_json, '$.llm_call_count') = 0 THEN 'failed'
        ELSE 'completed' END
     WHERE session_id = NEW.session_id;
  END;
  CREATE TRIGGER IF NOT EXISTS summary_call_completed AFTER INSERT ON events
  WHEN NEW.type = 'llm.call_completed' BEGIN
    ${ensureRow}
    UPDATE session_summaries
       SET model = json_extract(NEW.payload_json, '$.model'),
           input_tokens = input_tokens + coalesce(json_extract(NEW.payload_json, '$.input_tokens'), 0),
           output_tokens = output_tokens + coalesce(json_extract(NEW.payload_json, '$.output_tokens'), 0),
           cost_usd = cost_usd + coalesce(json_extract(NEW.payload_json, '$.cost_usd'), 0),
           latency_bins = ${addToHistogram('latency_bins', "json_extract(NEW.payload_json, '$.latency_ms')")},
           last_call_failed = 0
     WHERE session_id = NEW.session_id;
  END;
  CREATE TRIGGER IF NOT EXISTS summary_call_failed AFTER INSERT ON events
  WHEN NEW.type = 'llm.call_failed' BEGIN
    ${ensureRow}
    UPDATE session_summaries
       SET model = json_extract(NEW.payload_json, '$.model'), last_call_failed = 1
     WHERE session_id = NEW.session_id;
  END;

  CREATE TRIGGER IF NOT EXISTS summary_first_message AFTER INSERT ON messages
  WHEN NEW.role = 'user' BEGIN
    ${ensureRow}
    UPDATE session_summaries SET first_message = substr(${textOf('NEW.content_json')}, 1, 400)
     WHERE session_id = NEW.session_id AND first_message IS NULL;
  END;
  CREATE TRIGGER IF NOT EXISTS search_message_inserted AFTER INSERT ON messages
  WHEN NEW.role IN ('user', 'assistant') BEGIN
    INSERT INTO message_search (rowid, body) VALUES (NEW.rowid, coalesce(${textOf('NEW.content_json')}, ''));
  END;
  CREATE TRIGGER IF NOT EXISTS search_message_updated AFTER UPDATE OF content_json ON messages
  WHEN NEW.role IN ('user', 'assistant') BEGIN
    DELETE FROM message_search WHERE rowid = OLD.rowid;
    INSERT INTO message_search (rowid, body) VALUES (NEW.rowid, coalesce(${textOf('NEW.content_json')}, ''));
  END;
  CREATE TRIGGER IF NOT EXISTS search_message_deleted AFTER DELETE ON messages BEGIN
    DELETE FROM message_search WHERE rowid = OLD.rowid;
  END;

  -- What was stored before this version. The summaries and the index are derived from the events and
  -- messages, so a migration run again (a file marked older than it is) rebuilds them from scratch.
  DELETE FROM session_summaries;
  DELETE FROM message_search;
  INSERT OR IGNORE INTO session_summaries
    (session_id, first_message, model, input_tokens, output_tokens, cost_usd, turn_count, conformance)
  SELECT s.id,
         (SELECT substr(${textOf('m.content_json')}, 1, 400) FROM messages AS m
           WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.created_at_us, m.id LIMIT 1),
         (SELECT json_extract(e.payload_json, '$.model') FROM events AS e
           WHERE e.session_id = s.id AND e.type IN ('llm.call_completed', 'llm.call_failed')
           ORDER BY e.id DESC LIMIT 1),
         coalesce((SELECT sum(json_extract(e.payload_json, '$.input_tokens')) FROM events AS e
                    WHERE e.session_id = s.id AND e.type = 'llm.call_completed'), 0),
         coalesce((SELECT sum(json_extract(e.payload_json, '$.output_tokens')) FROM events AS e
                    WHERE e.session_id = s.id AND e.type = 'llm.call_completed'), 0),
         coalesce((SELECT sum(json_extract(e.payload_json, '$.cost_usd')) FROM events AS e
                    WHERE e.session_id = s.id AND e.type = 'llm.call_completed'), 0),
         (SELECT count(*) FROM events AS e WHERE e.session_id = s.id AND e.type = 'turn.started'),
         coalesce((SELECT json_extract(e.payload_json, '$.initial_active_model') = '${CONFORMANCE_MARK_MODEL}'
                     FROM events AS e WHERE e.session_id = s.id AND e.type = 'session.created' LIMIT 1),
                  s.active_model = '${CONFORMANCE_MARK_MODEL}', 0)
    FROM sessions AS s;
  UPDATE session_summaries SET last_turn_status = (
    SELECT CASE
      WHEN ended.type IS NULL THEN 'running'
      WHEN ended.type = 'turn.cancelled' THEN 'cancelled'
      WHEN json_type(ended.payload_json, '$.signals_extra.failure') = 'text'
        OR json_extract(ended.payload_json, '$.llm_call_count') = 0
        OR (SELECT c.type FROM events AS c
             WHERE c.session_id = started.session_id AND c.turn_id = started.turn_id
               AND c.type IN ('llm.call_completed', 'llm.call_failed')
             ORDER BY c.id DESC LIMIT 1) = 'llm.call_failed' THEN 'failed'
      ELSE 'completed' END
      FROM events AS started
      LEFT JOIN events AS ended ON ended.session_id = started.session_id AND ended.turn_id = started.turn_id
                               AND ended.type IN ('turn.completed', 'turn.cancelled')
     WHERE started.session_id = session_summaries.session_id AND started.type = 'turn.started'
     ORDER BY started.id DESC LIMIT 1);
  UPDATE session_summaries SET latency_bins = (
    SELECT json_group_object(CAST(bin AS TEXT), calls) FROM (
      SELECT ${binOf("json_extract(payload_json, '$.latency_ms')")} AS bin, count(*) AS calls FROM events
       WHERE session_id = session_summaries.session_id AND type = 'llm.call_completed' GROUP BY 1))
   WHERE turn_count > 0;
  WITH RECURSIVE marked(id) AS (
    SELECT session_id FROM session_summaries WHERE conformance = 1
    UNION SELECT sessions.id FROM sessions JOIN marked ON sessions.parent_session_id = marked.id)
  UPDATE session_summaries SET conformance = 1 WHERE session_id IN (SELECT id FROM marked);
  INSERT INTO message_search (rowid, body)
    SELECT rowid, coalesce(${textOf('content_json')}, '') FROM messages WHERE role IN ('user', 'assistant');
${USAGE_ROLLUP_MIGRATION}`;
