import type { Db } from './database.js';
import { storedQuantile } from './latency-bins.js';
import type { SessionRecord } from './session-store.js';

/** What `GET /sessions` may filter on (session-list-route.ts validates the query). */
export interface SessionSearch {
  /** Words matched (as prefixes) in user and assistant messages; a substring of the title; or an id. */
  readonly q?: string;
  readonly status?: 'active' | 'ended';
  readonly turnStatus?: TurnStatus;
  readonly model?: string;
  readonly fromUs?: number;
  readonly toUs?: number;
  readonly minCostUsd?: number;
  readonly maxCostUsd?: number;
  /** Bounds on the p95 of the session's model-call latency (from its histogram); no call: no match. */
  readonly minLatencyP95Ms?: number;
  readonly maxLatencyP95Ms?: number;
  readonly includeConformance: boolean;
  readonly limit: number;
  /** Where the previous page ended (created_at_us, id): the next page is strictly older. */
  readonly after?: { readonly createdAtUs: number; readonly id: string } | null;
}

export type TurnStatus = 'running' | 'completed' | 'failed' | 'cancelled';

/** A session as the list shows it, from its row, its summary and its title. */
export interface SessionListRow extends SessionRecord {
  readonly turn_count: number;
  readonly cost_usd: number;
  readonly last_activity_at: string | null;
  readonly title: string | null;
  readonly title_source: 'user' | 'first_message' | null;
  readonly tags: string[];
  readonly model: string | null;
  readonly tokens: { readonly input: number; readonly output: number };
  readonly latency_ms: { readonly p50: number; readonly p95: number } | null;
  readonly last_turn_status: TurnStatus | null;
}

/** How long a title made of the first message may be. */
export const TITLE_FROM_MESSAGE_CHARS = 80;

const COLUMNS = `s.id, s.parent_session_id, s.workspace_path, s.workspace_hash, s.active_model, s.sticky_model,
  s.status, s.disposition, s.created_at_us, s.updated_at_us,
  coalesce(sm.turn_count, 0) AS turn_count, coalesce(sm.cost_usd, 0) AS cost_usd,
  sm.first_message, sm.model, coalesce(sm.input_tokens, 0) AS input_tokens,
  coalesce(sm.output_tokens, 0) AS output_tokens, sm.last_turn_status, coalesce(sm.conformance, 0) AS conformance,
  sm.latency_bins, t.title AS user_title`;

const FROM = `FROM sessions AS s
  LEFT JOIN session_summaries AS sm ON sm.session_id = s.id
  LEFT JOIN session_titles AS t ON t.session_id = s.id`;

type Row = Omit<
  SessionListRow,
  'last_activity_at' | 'title' | 'title_source' | 'tags' | 'tokens' | 'latency_ms'
> & {
  first_message: string | null;
  input_tokens: number;
  output_tokens: number;
  conformance: number;
  latency_bins: string | null;
  user_title: string | null;
};

/** Connections that know `latency_quantile(histogram, q)`, the SQL face of storedQuantile. */
const withQuantile = new WeakSet<Db>();

function registerQuantile(db: Db): void {
  if (withQuantile.has(db)) return;
  db.function('latency_quantile', { deterministic: true }, (json: unknown, q: unknown) =>
    storedQuantile(typeof json === 'string' ? json : null, Number(q)),
  );
  withQuantile.add(db);
}

/**
 * One page of sessions, newest first (created_at_us, then id), filtered in SQL on the summaries the
 * database keeps (session-index-schema.ts); `more` when another page follows. The text search asks the
 * FTS index once and keeps the matching sessions as a set.
 */
export function searchSessions(db: Db, search: SessionSearch): { rows: SessionListRow[]; more: boolean } {
  const where = ["s.id != 'system'"];
  const params: Record<string, unknown> = { limit: search.limit + 1 };
  if (search.after) {
    where.push('(s.created_at_us, s.id) < (@after_us, @after_id)');
    params.after_us = search.after.createdAtUs;
    params.after_id = search.after.id;
  }
  if (search.status !== undefined) {
    where.push('s.status = @status');
    params.status = search.status;
  }
  if (search.turnStatus !== undefined) {
    where.push('sm.last_turn_status = @turn_status');
    params.turn_status = search.turnStatus;
  }
  if (search.model !== undefined) {
    where.push('coalesce(sm.model, s.active_model) = @model');
    params.model = search.model;
  }
  if (search.fromUs !== undefined) {
    where.push('s.created_at_us >= @from_us');
    params.from_us = search.fromUs;
  }
  if (search.toUs !== undefined) {
    where.push('s.created_at_us <= @to_us');
    params.to_us = search.toUs;
  }
  if (search.minCostUsd !== undefined) {
    where.push('coalesce(sm.cost_usd, 0) >= @min_cost');
    params.min_cost = search.minCostUsd;
  }
  if (search.maxCostUsd !== undefined) {
    where.push('coalesce(sm.cost_usd, 0) <= @max_cost');
    params.max_cost = search.maxCostUsd;
  }
  if (search.minLatencyP95Ms !== undefined || search.maxLatencyP95Ms !== undefined) {
    registerQuantile(db);
    where.push('sm.latency_bins IS NOT NULL');
    if (search.minLatencyP95Ms !== undefined) {
      where.push('latency_quantile(sm.latency_bins, 0.95) >= @min_p95');
      params.min_p95 = search.minLatencyP95Ms;
    }
    if (search.maxLatencyP95Ms !== undefined) {
      where.push('latency_quantile(sm.latency_bins, 0.95) <= @max_p95');
      params.max_p95 = search.maxLatencyP95Ms;
    }
  }
  if (!search.includeConformance) where.push('coalesce(sm.conformance, 0) = 0');
  const q = search.q?.trim();
  if (q) {
    const match = ftsQuery(q);
    const textMatch = match
      ? `s.id IN (SELECT m.session_id FROM message_search AS f JOIN messages AS m ON m.rowid = f.rowid
                   WHERE message_search MATCH @match)`
      : '0';
    where.push(`(${textMatch} OR t.title LIKE @like ESCAPE '\\' OR s.id = @q)`);
    if (match) params.match = match;
    params.like = `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    params.q = q;
  }
  const rows = db
    .prepare(
      `SELECT ${COLUMNS} ${FROM} WHERE ${where.join(' AND ')}
        ORDER BY s.created_at_us DESC, s.id DESC LIMIT @limit`,
    )
    .all(params) as Row[];
  const more = rows.length > search.limit;
  return { rows: withActivity(db, rows.slice(0, search.limit)), more };
}

/** One session as the list shows it (the `PATCH /sessions/{id}` answer), or undefined when there is none. */
export function sessionListRow(db: Db, sessionId: string): SessionListRow | undefined {
  const rows = db.prepare(`SELECT ${COLUMNS} ${FROM} WHERE s.id = ?`).all(sessionId) as Row[];
  return withActivity(db, rows)[0];
}

/**
 * Where `GET /sessions` and the `PATCH /sessions/{id}` answer read: this server's database
 * (sqlite-whole-store-reads.ts), or the store of record (postgres/pg-store-reads.ts).
 */
export interface SessionLister {
  /** One page of sessions as `GET /sessions` answers it. */
  search(search: SessionSearch): Promise<{ rows: SessionListRow[]; more: boolean }>;
  /** One session as the list shows it, whatever the filters would say of it; undefined when none. */
  row(sessionId: string): Promise<SessionListRow | undefined>;
}

/** Last activity, read per listed session by its own events' key; latency from its histogram. */
function withActivity(db: Db, rows: readonly Row[]): SessionListRow[] {
  const lastEvent = db.prepare(
    'SELECT timestamp_us FROM events WHERE session_id = ? ORDER BY id DESC LIMIT 1',
  );
  return rows.map((row) => {
    const lastUs = lastEvent.pluck().get(row.id) as number | undefined;
    const { first_message, input_tokens, output_tokens, conformance, user_title, latency_bins, ...session } =
      row;
    const p50 = storedQuantile(latency_bins, 0.5);
    const p95 = storedQuantile(latency_bins, 0.95);
    const fromMessage = first_message === null ? null : titleFromMessage(first_message);
    return {
      ...session,
      last_activity_at: lastUs === undefined ? null : new Date(Math.floor(lastUs / 1000)).toISOString(),
      title: user_title ?? fromMessage,
      title_source: user_title !== null ? 'user' : fromMessage !== null ? 'first_message' : null,
      tags: conformance ? ['conformance'] : [],
      tokens: { input: input_tokens, output: output_tokens },
      latency_ms: p50 === null || p95 === null ? null : { p50, p95 },
    };
  });
}

/** The first message on one line, cut to TITLE_FROM_MESSAGE_CHARS (an ellipsis marks the cut). */
export function titleFromMessage(text: string): string | null {
  const line = text.replace(/\s+/g, ' ').trim();
  if (line === '') return null;
  const chars = [...line];
  return chars.length <= TITLE_FROM_MESSAGE_CHARS
    ? line
    : `${chars.slice(0, TITLE_FROM_MESSAGE_CHARS - 1).join('')}…`;
}

/**
 * The user's words as an FTS5 query: each word a quoted prefix, all required. Quoting keeps FTS5's
 * operators (AND, NEAR, `*`, `:`) literal, so any text the user types is a valid query.
 */
export function ftsQuery(text: string): string | null {
  const words = text.match(/[\p{L}\p{N}_]+/gu);
  if (!words) return null;
  return words
    .slice(0, 16)
    .map((word) => `"${word}"*`)
    .join(' ');
}
