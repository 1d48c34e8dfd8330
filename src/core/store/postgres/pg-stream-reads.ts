import type pg from 'pg';
import { microsToIso } from '../../events/clock.js';
import { EVENT_COLUMNS, type EventJsonRow, type EventRow, rowToJson } from '../event-rows.js';
import { type CountedCost, roundedCost, type SessionAsOf } from '../session-as-of.js';
import { MAX_DELEGATION_DEPTH } from '../session-lineage.js';
import { COST_EVENT_TYPES } from '../session-store.js';
import { STORED_BUDGET_SQL, storedBudgetOfRow } from '../stored-budget.js';
import {
  firstOfEach,
  LINEAGE_SQL,
  type LineageRow,
  type RetentionMarks,
  type StreamReads,
} from '../stream-reads.js';
import type { PayloadRow } from '../trace-lookups.js';
import type { ReplayQuery } from '../trace-store.js';
import { storedConfirmationRequest, UNANSWERED_CONFIRMATIONS_SQL } from '../unanswered-confirmations.js';
import type { UnsettledMessages } from '../unsettled-messages.js';
import { pgMessagesAsOf } from './pg-conversation-reads.js';
import { BIGINT_AS_NUMBER, readInIdOrder } from './pg-util.js';

const TURN_EDGES = ['turn.started', 'turn.completed', 'turn.cancelled'];
const CONFIRMATION_TYPES = ['tool.confirmation_requested', 'tool.confirmation_resolved'];
/**
 * A cost event's amount as `SessionStore.storedCost` counts it. Summed as numeric from the stored
 * decimal text: an exact sum, where float8 would add in whatever order the plan reads the rows.
 */
const COST_OF_ROW = `CASE type WHEN 'llm.call_completed' THEN (payload_json::jsonb ->> 'cost_usd')::numeric
  ELSE (payload_json::jsonb ->> 'worker_total_cost_usd')::numeric END`;

/**
 * One primary-key probe per session (a backward range scan, first row): `max(id)` over `= ANY` would
 * read every id of every session before the point. Exported for the test that checks its plan.
 */
export const EVENT_BEFORE_SQL = `SELECT max(before.id) AS id FROM unnest($1::text[]) AS s(session_id),
  LATERAL (SELECT id FROM events e WHERE e.session_id = s.session_id AND e.id < $2
           ORDER BY e.id DESC LIMIT 1) AS before`;

/**
 * The JSON envelope rowToJson builds, built by PostgreSQL in the query, as EVENT_JSON_SQL is by SQLite:
 * the driver then makes one string per row instead of ten values, which measured 25-35% off a replay of
 * 10,000 events (bench/pg-store.ts). to_json escapes text as JSON.stringify does, and a timestamp is
 * formatted from whole microseconds (no float), so the bytes are rowToJson's (the contract suite
 * compares them). Outside the years 1970-9999 it gives NULL and the row is encoded by rowToJson.
 */
const EVENT_JSON_PG = `CASE WHEN timestamp_us BETWEEN 0 AND 253402300799999999 THEN '{"id":' || to_json(id)::text
  || ',"timestamp":"' || to_char(timestamp '1970-01-01' + timestamp_us * interval '1 microsecond',
                                 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
  || '","session_id":' || to_json(session_id)::text
  || ',"turn_id":' || coalesce(to_json(turn_id)::text, 'null')
  || ',"parent_event_id":' || coalesce(to_json(parent_event_id)::text, 'null')
  || ',"type":' || to_json(type)::text
  || ',"actor":"' || actor || '","payload":' || payload_json
  || ',"sensitivity":"' || sensitivity || '","seq":' || seq || '}' END`;

/** Which of `query`'s filters apply; the rest are null (planned away: each query is planned with its values). */
export function replayStatement(query: ReplayQuery): pg.QueryArrayConfig {
  const many = query.sessionIds.length !== 1;
  return {
    // One session by `=`: the primary key (session_id, id) yields its rows in id order, no sort
    // (read with readInIdOrder: the planner left alone sorts them).
    text: `SELECT id, ${EVENT_JSON_PG} FROM events
            WHERE ${many ? 'session_id = ANY($1)' : 'session_id = $1'} AND id > $2
              AND ($3::text[] IS NULL OR type = ANY($3))
              AND ($4::text[] IS NULL OR actor = ANY($4))
            ORDER BY id LIMIT $5`,
    values: [
      many ? query.sessionIds : query.sessionIds[0],
      query.afterId ?? '',
      query.eventTypes ?? null,
      query.actors ?? null,
      query.limit + 1,
    ],
    rowMode: 'array',
    types: BIGINT_AS_NUMBER,
  };
}

/**
 * A page of stored events as frames (StreamReads.replayJson), each built by PostgreSQL where it can
 * format the timestamp and by rowToJson where it cannot. Also the trace page's replay
 * (pg-trace-content-reads.ts), which parses the same frames.
 */
export async function pgReplayJson(
  pool: pg.Pool,
  query: ReplayQuery,
): Promise<{ rows: EventJsonRow[]; tooLarge: boolean }> {
  const statement = replayStatement(query);
  const result =
    query.sessionIds.length === 1 ? await readInIdOrder(pool, statement) : await pool.query(statement);
  const rows = result.rows as [string, string | null][];
  const tooLarge = rows.length > query.limit;
  if (tooLarge) rows.length = query.limit;
  const unformatted = rows.filter((row) => row[1] === null).map((row) => row[0]);
  if (unformatted.length === 0) return { rows: rows as EventJsonRow[], tooLarge };
  const stored = await pool.query({
    text: `SELECT ${EVENT_COLUMNS} FROM events WHERE id = ANY($1)`,
    values: [unformatted],
    rowMode: 'array',
    types: BIGINT_AS_NUMBER,
  });
  const encoded = new Map((stored.rows as EventRow[]).map((row) => [row[0], rowToJson(row)]));
  return { rows: rows.map(([id, json]): EventJsonRow => [id, json ?? encoded.get(id)!]), tooLarge };
}

/**
 * The stream's reads (stream-reads.ts) answered by the PostgreSQL store of record, so a server with no
 * SQLite working copy can serve subscriptions (docs/plans/store-port.md, steps 7-8). Each answer is the
 * SQLite adapter's for the same events. `messagesAsOf` merges in what `unsettled` (the runtime's
 * WriteOnlySessionRows) holds in memory: the messages not committed yet, and when each was shown.
 */
export function pgStreamReads(pool: pg.Pool, unsettled: UnsettledMessages): StreamReads {
  const one = async <T>(text: string, values: unknown[]): Promise<T | undefined> =>
    (await pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows[0] as T | undefined;

  const costBetween = async (sessionId: string, after: string | null, upTo: string): Promise<number> => {
    // Two statements, not `($2 IS NULL OR id > $2)`, as on SQLite: one range on the primary key each.
    const row =
      after === null
        ? await one<{ cost: number }>(
            `SELECT coalesce(sum(${COST_OF_ROW}), 0)::float8 AS cost FROM events
              WHERE session_id = $1 AND id <= $2 AND type = ANY($3)`,
            [sessionId, upTo, COST_EVENT_TYPES],
          )
        : await one<{ cost: number }>(
            `SELECT coalesce(sum(${COST_OF_ROW}), 0)::float8 AS cost FROM events
              WHERE session_id = $1 AND id > $2 AND id <= $3 AND type = ANY($4)`,
            [sessionId, after, upTo, COST_EVENT_TYPES],
          );
    return row!.cost;
  };

  /** session-as-of.ts `costAsOf`, case for case. */
  const costAsOf = async (sessionId: string, atId: string, counted: CountedCost): Promise<number> => {
    if (counted.upTo === null) return costBetween(sessionId, null, atId);
    if (counted.upTo <= atId) return counted.costUsd + (await costBetween(sessionId, counted.upTo, atId));
    const oldest = counted.recent[0];
    if (oldest === undefined || oldest.id > atId) return costBetween(sessionId, null, atId);
    let after = 0;
    for (const entry of counted.recent) if (entry.id > atId) after += entry.amount;
    return counted.costUsd - after;
  };

  return {
    replayJson: (query) => pgReplayJson(pool, query),

    async eventBefore(sessionIds, beforeId) {
      const row = await one<{ id: string | null }>(EVENT_BEFORE_SQL, [sessionIds, beforeId]);
      return row?.id ?? null;
    },

    async sessionAsOf(sessionId, atId, counted): Promise<SessionAsOf> {
      const [turns, lastEdge, cost] = await Promise.all([
        one<{ turns: number }>(
          "SELECT count(*) AS turns FROM events WHERE session_id = $1 AND id <= $2 AND type = 'turn.started'",
          [sessionId, atId],
        ),
        one<{ type: string; turn_id: string | null }>(
          `SELECT type, turn_id FROM events WHERE session_id = $1 AND id <= $2 AND type = ANY($3)
            ORDER BY id DESC LIMIT 1`,
          [sessionId, atId, TURN_EDGES],
        ),
        costAsOf(sessionId, atId, counted),
      ]);
      return {
        turnCount: turns!.turns,
        currentTurnId: lastEdge?.type === 'turn.started' ? lastEdge.turn_id : null,
        costUsd: roundedCost(cost),
      };
    },

    messagesAsOf: pgMessagesAsOf(pool, unsettled),

    async storedBudget(sessionId) {
      const result = await pool.query<Parameters<typeof storedBudgetOfRow>[0]>(STORED_BUDGET_SQL, [
        sessionId,
        MAX_DELEGATION_DEPTH,
      ]);
      const row = result.rows[0];
      return row === undefined ? null : storedBudgetOfRow(row);
    },
    async unansweredConfirmations(sessionIds) {
      if (sessionIds.length === 0) return [];
      const result = await pool.query<{ session_id: string; turn_id: string | null; payload_json: string }>(
        UNANSWERED_CONFIRMATIONS_SQL,
        [sessionIds],
      );
      return result.rows.map((row) =>
        storedConfirmationRequest(row.session_id, row.turn_id, row.payload_json),
      );
    },
    async confirmationEventsThrough(sessionIds, throughId) {
      const result = await pool.query<PayloadRow>({
        text: `SELECT id, session_id, timestamp_us, type, turn_id, payload_json FROM events
                WHERE session_id = ANY($1) AND id <= $2 AND type = ANY($3)
                ORDER BY id`,
        values: [sessionIds, throughId, CONFIRMATION_TYPES],
        types: BIGINT_AS_NUMBER,
      });
      return result.rows;
    },

    async retention(sessionId): Promise<RetentionMarks> {
      const [sweptCutoffMs, oldestKept] = await Promise.all([
        lastSweepCutoffMs(pool),
        one<{ id: string; type: string }>(
          'SELECT id, type FROM events WHERE session_id = $1 ORDER BY id LIMIT 1',
          [sessionId],
        ),
      ]);
      return { sweptCutoffMs, oldestKept: oldestKept ?? null };
    },

    async lineage(sessionId) {
      const result = await pool.query<LineageRow>(LINEAGE_SQL, [sessionId, MAX_DELEGATION_DEPTH]);
      return firstOfEach(result.rows);
    },
  };
}

/**
 * The cutoff of the newest sweep in unix ms, as `TraceStore.lastSweepCutoffMs` reads it from the newest
 * `trace.swept`; or the cutoff of a sweep started after it and not recorded yet (pg-prune.ts writes
 * its row in `metis_retention_sweeps` before deleting anything, and a server records `trace.swept` once
 * it is done): the events older than that cutoff may be gone already.
 */
async function lastSweepCutoffMs(pool: pg.Pool): Promise<number | null> {
  const result = await pool.query<{ at_us: number; cutoff: string }>({
    text: `(SELECT timestamp_us AS at_us, payload_json::jsonb ->> 'cutoff_timestamp' AS cutoff FROM events
             WHERE type = 'trace.swept' ORDER BY timestamp_us DESC LIMIT 1)
           UNION ALL
           (SELECT started_at_us, cutoff_us::text FROM metis_retention_sweeps
             WHERE recorded_by IS NULL ORDER BY started_at_us DESC LIMIT 1)`,
    types: BIGINT_AS_NUMBER,
  });
  let newest: { at_us: number; cutoff: string } | undefined;
  for (const row of result.rows) if (newest === undefined || row.at_us > newest.at_us) newest = row;
  if (newest === undefined) return null;
  // The sweep's row holds microseconds; trace.swept holds them as an ISO time: parsed the same way.
  const iso = /^\d+$/.test(newest.cutoff) ? microsToIso(Number(newest.cutoff)) : newest.cutoff;
  return Date.parse(iso);
}
