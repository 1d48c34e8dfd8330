import type pg from 'pg';
import { addHistogram, binQuantile, emptyHistogram, LATENCY_BINS_PER_OCTAVE } from '../latency-bins.js';
import { NO_MODEL, USAGE_HOUR_US } from '../usage-rollup-schema.js';
import type { UsageQuery, UsageRow } from '../usage-stats.js';

/**
 * `GET /stats/usage` read from PostgreSQL, for a cluster node (whose working copy holds only its own
 * sessions): the figures usage-stats.ts reads from SQLite's hourly rollup, computed from the events of
 * the range by the `(type, timestamp_us)` index, counted as the rollup's triggers count them: completed
 * calls, tokens, cost and latency bins under the call's model; failed calls but cancels; failed turns
 * (said so, no call made, or the last call failed) under the turn's last model; feedback and eval
 * verdicts under the judged turn's last model, else the session's.
 */

const BIN = `round(${LATENCY_BINS_PER_OCTAVE} * log(2, greatest(coalesce((e.payload_json::jsonb ->> 'latency_ms')::numeric, 0), 1)))::int`;
const MODEL = `coalesce(e.payload_json::jsonb ->> 'model', '${NO_MODEL}')`;
/** The model of a turn's last model call (`turn` names the turn id). */
const turnModel = (turn: string) =>
  `(SELECT c.payload_json::jsonb ->> 'model' FROM events c
     WHERE c.turn_id = ${turn} AND c.type IN ('llm.call_completed', 'llm.call_failed') ORDER BY c.id DESC LIMIT 1)`;
/** The model of a session's last model call. */
const sessionModel = (session: string) =>
  `(SELECT c.payload_json::jsonb ->> 'model' FROM events c
     WHERE c.session_id = ${session} AND c.type IN ('llm.call_completed', 'llm.call_failed') ORDER BY c.id DESC LIMIT 1)`;
const judgedTurn = `coalesce(e.payload_json::jsonb ->> 'subject_turn_id',
  CASE WHEN e.payload_json::jsonb ->> 'subject_kind' = 'turn' THEN e.payload_json::jsonb ->> 'subject_id' END)`;

/** The events of `types` in the range, as the rollup's hours bound it ($1 from, $2 to, $3 bucket width). */
const inRange = (types: string) => `FROM events e
  WHERE e.type IN (${types}) AND e.timestamp_us >= $1 AND e.timestamp_us < $4
    AND e.timestamp_us / ${USAGE_HOUR_US} * ${USAGE_HOUR_US} < $2`;

const ROWS = `
WITH figures AS (
  SELECT e.timestamp_us / $3 * $3 AS bucket_us, ${MODEL} AS model, 1 AS calls,
         coalesce((e.payload_json::jsonb ->> 'input_tokens')::float8, 0) AS input_tokens,
         coalesce((e.payload_json::jsonb ->> 'output_tokens')::float8, 0) AS output_tokens,
         coalesce((e.payload_json::jsonb ->> 'cost_usd')::float8, 0) AS cost_usd,
         0 AS failed_calls, 0 AS failed_turns, 0 AS feedback_up, 0 AS feedback_down, 0 AS eval_count, 0::float8 AS eval_sum
    ${inRange("'llm.call_completed'")}
  UNION ALL
  SELECT e.timestamp_us / $3 * $3, ${MODEL}, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0
    ${inRange("'llm.call_failed'")} AND coalesce(e.payload_json::jsonb ->> 'error_class', '') <> 'cancelled'
  UNION ALL
  SELECT e.timestamp_us / $3 * $3,
         CASE WHEN e.payload_json::jsonb ->> 'llm_call_count' = '0' THEN '${NO_MODEL}'
              ELSE coalesce(${turnModel('e.turn_id')}, '${NO_MODEL}') END, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0
    ${inRange("'turn.completed'")}
     AND (jsonb_typeof(e.payload_json::jsonb -> 'signals_extra' -> 'failure') = 'string'
          OR e.payload_json::jsonb ->> 'llm_call_count' = '0'
          OR (SELECT c.type FROM events c WHERE c.turn_id = e.turn_id
                AND c.type IN ('llm.call_completed', 'llm.call_failed') ORDER BY c.id DESC LIMIT 1) = 'llm.call_failed')
  UNION ALL
  SELECT e.timestamp_us / $3 * $3,
         coalesce(${turnModel(judgedTurn)}, ${sessionModel('e.session_id')}, '${NO_MODEL}'), 0, 0, 0, 0, 0, 0,
         (e.payload_json::jsonb ->> 'rating' = 'thumbs_up')::int, (e.payload_json::jsonb ->> 'rating' = 'thumbs_down')::int, 0, 0
    ${inRange("'feedback.explicit'")}
  UNION ALL
  SELECT e.timestamp_us / $3 * $3,
         coalesce(${turnModel(judgedTurn)}, ${sessionModel('e.session_id')}, '${NO_MODEL}'), 0, 0, 0, 0, 0, 0, 0, 0,
         1, (e.payload_json::jsonb ->> 'score')::float8
    ${inRange("'eval.completed'")} AND jsonb_typeof(e.payload_json::jsonb -> 'score') = 'number'
)
SELECT bucket_us, model, sum(calls)::int AS calls, sum(input_tokens)::float8 AS input_tokens,
       sum(output_tokens)::float8 AS output_tokens, sum(cost_usd)::float8 AS cost_usd,
       sum(failed_calls)::int AS failed_calls, sum(failed_turns)::int AS failed_turns,
       sum(feedback_up)::int AS feedback_up, sum(feedback_down)::int AS feedback_down,
       sum(eval_count)::int AS eval_count, sum(eval_sum)::float8 AS eval_sum
  FROM figures WHERE $5::text IS NULL OR model = $5
 GROUP BY 1, 2 ORDER BY 1, model COLLATE "C"`;

const LATENCIES = `
SELECT e.timestamp_us / $3 * $3 AS bucket_us, ${MODEL} AS model, ${BIN} AS bin, count(*)::int AS calls
  ${inRange("'llm.call_completed'")}
 GROUP BY 1, 2, 3`;

interface Totals {
  bucket_us: number;
  model: string;
  calls: number;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
  failed_calls: number;
  failed_turns: number;
  feedback_up: number;
  feedback_down: number;
  eval_count: number;
  eval_sum: number;
}

/** The usage rows of a range, as usageByBucket answers them from SQLite. */
export async function pgUsageByBucket(
  client: pg.ClientBase | pg.Pool,
  query: UsageQuery,
): Promise<UsageRow[]> {
  const width = query.bucket === 'hour' ? USAGE_HOUR_US : 24 * USAGE_HOUR_US;
  const from = Math.floor(query.fromUs / USAGE_HOUR_US) * USAGE_HOUR_US;
  // The last hour the range reaches, whole: the rollup keeps hours.
  const scanTo = Math.ceil(query.toUs / USAGE_HOUR_US) * USAGE_HOUR_US;
  const values = [from, query.toUs, width, scanTo, query.model ?? null];
  const totals = (await client.query<Totals>(ROWS, values)).rows;
  const histograms = new Map<string, Float64Array>();
  for (const row of (
    await client.query<{ bucket_us: number; model: string; bin: number; calls: number }>(
      LATENCIES,
      values.slice(0, 4),
    )
  ).rows) {
    const key = `${row.bucket_us}\u0000${row.model}`;
    let merged = histograms.get(key);
    if (merged === undefined) {
      merged = emptyHistogram();
      histograms.set(key, merged);
    }
    addHistogram(merged, JSON.stringify({ [row.bin]: row.calls }));
  }
  return totals.map(({ bucket_us, eval_sum, ...row }) => {
    const histogram = histograms.get(`${bucket_us}\u0000${row.model}`) ?? new Float64Array(0);
    return {
      bucket: new Date(bucket_us / 1000).toISOString(),
      ...row,
      latency_p50_ms: binQuantile(histogram, 0.5),
      latency_p95_ms: binQuantile(histogram, 0.95),
      failures: row.failed_calls + row.failed_turns,
      eval_mean: row.eval_count === 0 ? null : eval_sum / row.eval_count,
    };
  });
}
