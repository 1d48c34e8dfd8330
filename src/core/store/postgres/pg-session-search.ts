import type pg from 'pg';
import { toSessionRecord } from '../family-state.js';
import { LATENCY_BINS_PER_OCTAVE, storedQuantile } from '../latency-bins.js';
import { CONFORMANCE_MARK_MODEL } from '../session-index-schema.js';
import {
  type SessionListRow,
  type SessionSearch,
  type TurnStatus,
  titleFromMessage,
} from '../session-search.js';

/**
 * `GET /sessions` read from PostgreSQL, for a server whose store is PostgreSQL: every node lists every
 * session of the store, whichever node made or followed it, with the same rows, filters and pages as
 * the SQLite list (session-search.ts). PostgreSQL keeps no summaries: each listed session's figures are
 * computed from its own events by its key (`(session_id, id)`), walking the sessions newest first and
 * stopping at the page's end, so a page costs its sessions' events, not the store's. The text search is
 * PostgreSQL's own (`to_tsvector('simple')`, each word a prefix), over the same text blocks.
 */

/** A session's text blocks of a message, joined by a space (session-index-schema.ts `textOf`). */
const messageText = (column: string) =>
  `(SELECT string_agg(block ->> 'text', ' ') FROM jsonb_array_elements(
      CASE WHEN jsonb_typeof(${column}::jsonb) = 'array' THEN ${column}::jsonb ELSE '[]'::jsonb END) AS block
     WHERE block ->> 'type' = 'text')`;

/** The latency bin of a call (latency-bins.ts `binOf`), and the ms a quantile of bins stands for. */
const BIN = `round(${LATENCY_BINS_PER_OCTAVE} * log(2, greatest(coalesce((c.p ->> 'latency_ms')::numeric, 0), 1)))`;
const quantileMs = (q: number) =>
  `(SELECT round((2 ^ (percentile_disc(${q}) WITHIN GROUP (ORDER BY bin) / ${LATENCY_BINS_PER_OCTAVE}.0))::numeric * 10) / 10
      FROM unnest(sm.bins) AS bin)`;

const SELECT = `
SELECT s.id, s.parent_session_id, s.workspace_path, s.workspace_hash, s.active_model, s.sticky_model,
       s.status, s.disposition, s.created_at_us, s.updated_at_us,
       sm.turn_count, sm.cost_usd, sm.input_tokens, sm.output_tokens, sm.model, sm.bins,
       lt.last_turn_status, fm.first_message, cf.conformance, t.title AS user_title,
       (SELECT e.timestamp_us FROM events e WHERE e.session_id = s.id ORDER BY e.id DESC LIMIT 1) AS last_us
  FROM (SELECT * FROM sessions WHERE %WHERE% ORDER BY created_at_us DESC, id DESC OFFSET 0) AS s
  LEFT JOIN session_titles t ON t.session_id = s.id
  CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE c.type = 'turn.started')::int AS turn_count,
           coalesce(sum((c.p ->> 'cost_usd')::float8) FILTER (WHERE c.type = 'llm.call_completed'), 0) AS cost_usd,
           coalesce(sum((c.p ->> 'input_tokens')::float8) FILTER (WHERE c.type = 'llm.call_completed'), 0)::bigint AS input_tokens,
           coalesce(sum((c.p ->> 'output_tokens')::float8) FILTER (WHERE c.type = 'llm.call_completed'), 0)::bigint AS output_tokens,
           (array_agg(c.p ->> 'model' ORDER BY c.id DESC) FILTER (WHERE c.type <> 'turn.started'))[1] AS model,
           array_agg(${BIN}) FILTER (WHERE c.type = 'llm.call_completed') AS bins
      FROM (SELECT e.id, e.type, CASE WHEN e.type = 'turn.started' THEN NULL ELSE e.payload_json::jsonb END AS p
              FROM events e
             WHERE e.session_id = s.id AND e.type IN ('turn.started', 'llm.call_completed', 'llm.call_failed')) AS c
  ) AS sm
  LEFT JOIN LATERAL (
    SELECT CASE
             WHEN ended.type IS NULL THEN 'running'
             WHEN ended.type = 'turn.cancelled' THEN 'cancelled'
             WHEN jsonb_typeof(ended.p -> 'signals_extra' -> 'failure') = 'string'
               OR ended.p ->> 'llm_call_count' = '0' OR last_call.type = 'llm.call_failed' THEN 'failed'
             ELSE 'completed' END AS last_turn_status
      FROM (SELECT e.turn_id FROM events e WHERE e.session_id = s.id AND e.type = 'turn.started'
             ORDER BY e.id DESC LIMIT 1) AS started
      LEFT JOIN LATERAL (
        SELECT e.type, e.payload_json::jsonb AS p FROM events e
         WHERE e.session_id = s.id AND e.turn_id = started.turn_id AND e.type IN ('turn.completed', 'turn.cancelled')
         ORDER BY e.id LIMIT 1) AS ended ON true
      LEFT JOIN LATERAL (
        SELECT e.type FROM events e
         WHERE e.session_id = s.id AND e.turn_id = started.turn_id AND e.type IN ('llm.call_completed', 'llm.call_failed')
         ORDER BY e.id DESC LIMIT 1) AS last_call ON true
  ) AS lt ON true
  LEFT JOIN LATERAL (
    SELECT substr(${messageText('m.content_json')}, 1, 400) AS first_message FROM messages m
     WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.created_at_us, m.id LIMIT 1
  ) AS fm ON true
  CROSS JOIN LATERAL (
    WITH RECURSIVE line (id, parent) AS (
      SELECT s.id, s.parent_session_id
      UNION ALL SELECT up.id, up.parent_session_id FROM sessions up JOIN line ON up.id = line.parent)
    SELECT coalesce(bool_or(EXISTS (
             SELECT 1 FROM events e WHERE e.session_id = line.id AND e.type = 'session.created'
                AND e.payload_json::jsonb ->> 'initial_active_model' = '${CONFORMANCE_MARK_MODEL}')), false) AS conformance
      FROM line
  ) AS cf`;

interface PgRow {
  id: string;
  parent_session_id: string | null;
  workspace_path: string | null;
  workspace_hash: string | null;
  active_model: string | null;
  sticky_model: string | null;
  status: 'active' | 'ended';
  disposition: string | null;
  created_at_us: number;
  updated_at_us: number;
  turn_count: number;
  cost_usd: number;
  input_tokens: number;
  output_tokens: number;
  model: string | null;
  bins: number[] | null;
  last_turn_status: TurnStatus | null;
  first_message: string | null;
  conformance: boolean;
  last_us: number | null;
  user_title: string | null;
}

/** The user's words as a tsquery: each word a prefix, all required (as ftsQuery does for FTS5). */
export function tsQuery(text: string): string | null {
  const words = text.match(/[\p{L}\p{N}_]+/gu);
  if (!words) return null;
  return words
    .slice(0, 16)
    .map((word) => `${word.toLowerCase()}:*`)
    .join(' & ');
}

/**
 * One page of sessions from PostgreSQL, newest first (created_at_us, then id), as `searchSessions` of
 * session-search.ts answers it from SQLite; `more` when another page follows.
 */
export async function searchPgSessions(
  client: pg.ClientBase | pg.Pool,
  search: SessionSearch,
): Promise<{ rows: SessionListRow[]; more: boolean }> {
  const inner = ["id <> 'system'"];
  const outer: string[] = [];
  const values: unknown[] = [];
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  if (search.after)
    inner.push(`(created_at_us, id) < (${param(search.after.createdAtUs)}, ${param(search.after.id)})`);
  if (search.status !== undefined) inner.push(`status = ${param(search.status)}`);
  if (search.fromUs !== undefined) inner.push(`created_at_us >= ${param(search.fromUs)}`);
  if (search.toUs !== undefined) inner.push(`created_at_us <= ${param(search.toUs)}`);
  if (search.turnStatus !== undefined) outer.push(`lt.last_turn_status = ${param(search.turnStatus)}`);
  if (search.model !== undefined) outer.push(`coalesce(sm.model, s.active_model) = ${param(search.model)}`);
  if (search.minCostUsd !== undefined) outer.push(`sm.cost_usd >= ${param(search.minCostUsd)}`);
  if (search.maxCostUsd !== undefined) outer.push(`sm.cost_usd <= ${param(search.maxCostUsd)}`);
  if (search.minLatencyP95Ms !== undefined || search.maxLatencyP95Ms !== undefined) {
    outer.push('sm.bins IS NOT NULL');
    if (search.minLatencyP95Ms !== undefined)
      outer.push(`${quantileMs(0.95)} >= ${param(search.minLatencyP95Ms)}`);
    if (search.maxLatencyP95Ms !== undefined)
      outer.push(`${quantileMs(0.95)} <= ${param(search.maxLatencyP95Ms)}`);
  }
  if (!search.includeConformance) outer.push('NOT cf.conformance');
  const q = search.q?.trim();
  if (q) {
    const match = tsQuery(q);
    const textMatch = match
      ? `s.id IN (SELECT m.session_id FROM messages m WHERE m.role IN ('user', 'assistant')
                   AND to_tsvector('simple', coalesce(${messageText('m.content_json')}, '')) @@ to_tsquery('simple', ${param(match)}))`
      : 'false';
    // A title matches as SQLite's LIKE does: the words anywhere in it, ASCII case aside.
    const titleLike = `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    outer.push(`(${textMatch} OR t.title ILIKE ${param(titleLike)} OR s.id = ${param(q)})`);
  }
  const text = `${SELECT.replace('%WHERE%', inner.join(' AND '))}
    ${outer.length === 0 ? '' : `WHERE ${outer.join(' AND ')}`}
    ORDER BY s.created_at_us DESC, s.id DESC LIMIT ${param(search.limit + 1)}`;
  const found = (await client.query<PgRow>(text, values)).rows;
  const page = found.slice(0, search.limit);
  return {
    rows: page.map((row) => listRow(row, row.user_title)),
    more: found.length > search.limit,
  };
}

/** One session as the list shows it, read from PostgreSQL as session-search.ts `sessionListRow` reads it. */
export async function pgSessionListRow(
  client: pg.ClientBase | pg.Pool,
  sessionId: string,
): Promise<SessionListRow | undefined> {
  const found = await client.query<PgRow>(SELECT.replace('%WHERE%', 'id = $1'), [sessionId]);
  const row = found.rows[0];
  return row === undefined ? undefined : listRow(row, row.user_title);
}

/** A row as the list shows it, its latency from the same histogram the SQLite summaries keep. */
function listRow(row: PgRow, userTitle: string | null): SessionListRow {
  const histogram: Record<string, number> = {};
  for (const bin of row.bins ?? []) histogram[String(bin)] = (histogram[String(bin)] ?? 0) + 1;
  const bins = row.bins === null ? null : JSON.stringify(histogram);
  const p50 = storedQuantile(bins, 0.5);
  const p95 = storedQuantile(bins, 0.95);
  const fromMessage = row.first_message === null ? null : titleFromMessage(row.first_message);
  return {
    ...toSessionRecord(row),
    turn_count: row.turn_count,
    cost_usd: row.cost_usd,
    model: row.model,
    last_turn_status: row.last_turn_status,
    last_activity_at: row.last_us === null ? null : new Date(Math.floor(row.last_us / 1000)).toISOString(),
    title: userTitle ?? fromMessage,
    title_source: userTitle !== null ? 'user' : fromMessage !== null ? 'first_message' : null,
    tags: row.conformance ? ['conformance'] : [],
    tokens: { input: row.input_tokens, output: row.output_tokens },
    latency_ms: p50 === null || p95 === null ? null : { p50, p95 },
  };
}
