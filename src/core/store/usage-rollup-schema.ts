/**
 * Part of migration 7 (issue 30): `GET /stats/usage` reads an hourly rollup per model, kept by triggers
 * in the transaction that stores each event, so a 30- or 90-day chart reads a few thousand rows, not
 * the hundreds of thousands of events behind them.
 *
 * - `usage_hourly`: per UTC hour and model, completed calls, tokens, cost, failed calls (not cancels),
 *   failed turns (as the session list counts them, under the model of the turn's last call, or
 *   `(none)` when no model served it), feedback and eval verdicts (under the rated turn's last model).
 *   Its `latency_bins` is the completed calls' latency histogram (latency-bins.ts). One small object
 *   per hour and model keeps a 90-day chart to ~10,000 rows (a row per bin was ten times that).
 *
 * Runs after session-index-schema.ts, whose `session_summaries` it reads.
 */

import { addToHistogram, binOf } from './latency-bins.js';

export const USAGE_HOUR_US = 3_600_000_000;
export const NO_MODEL = '(none)';

const hourOf = (column: string) => `(${column} / ${USAGE_HOUR_US} * ${USAGE_HOUR_US})`;
/** The model of a turn's last model call. */
const turnModel = (turnId: string) =>
  `(SELECT json_extract(c.payload_json, '$.model') FROM events AS c
     WHERE c.turn_id = ${turnId} AND c.type IN ('llm.call_completed', 'llm.call_failed') ORDER BY c.id DESC LIMIT 1)`;
const sessionModel = (sessionId: string) =>
  `(SELECT model FROM session_summaries WHERE session_id = ${sessionId})`;
const p = (path: string) => `json_extract(NEW.payload_json, '${path}')`;
/** The turn a feedback or an eval verdict judges, if it judges one. */
const judgedTurn = `coalesce(${p('$.subject_turn_id')}, CASE WHEN ${p('$.subject_kind')} = 'turn' THEN ${p('$.subject_id')} END)`;

export const USAGE_ROLLUP_MIGRATION = `
  CREATE TABLE IF NOT EXISTS usage_hourly (
    hour_us INTEGER NOT NULL,
    model TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    failed_calls INTEGER NOT NULL DEFAULT 0,
    failed_turns INTEGER NOT NULL DEFAULT 0,
    feedback_up INTEGER NOT NULL DEFAULT 0,
    feedback_down INTEGER NOT NULL DEFAULT 0,
    eval_count INTEGER NOT NULL DEFAULT 0,
    eval_sum REAL NOT NULL DEFAULT 0,
    latency_bins TEXT,
    PRIMARY KEY (hour_us, model)
  ) WITHOUT ROWID;

  CREATE TRIGGER IF NOT EXISTS usage_call_completed AFTER INSERT ON events
  WHEN NEW.type = 'llm.call_completed' BEGIN
    INSERT INTO usage_hourly (hour_us, model, calls, input_tokens, output_tokens, cost_usd, latency_bins)
    VALUES (${hourOf('NEW.timestamp_us')}, coalesce(${p('$.model')}, '${NO_MODEL}'), 1,
            coalesce(${p('$.input_tokens')}, 0), coalesce(${p('$.output_tokens')}, 0), coalesce(${p('$.cost_usd')}, 0),
            json_object(CAST(${binOf(p('$.latency_ms'))} AS TEXT), 1))
    ON CONFLICT (hour_us, model) DO UPDATE SET calls = calls + 1,
      input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
      cost_usd = cost_usd + excluded.cost_usd,
      latency_bins = ${addToHistogram('latency_bins', p('$.latency_ms'))};
  END;
  CREATE TRIGGER IF NOT EXISTS usage_call_failed AFTER INSERT ON events
  WHEN NEW.type = 'llm.call_failed' AND coalesce(${p('$.error_class')}, '') != 'cancelled' BEGIN
    INSERT INTO usage_hourly (hour_us, model, failed_calls)
    VALUES (${hourOf('NEW.timestamp_us')}, coalesce(${p('$.model')}, '${NO_MODEL}'), 1)
    ON CONFLICT (hour_us, model) DO UPDATE SET failed_calls = failed_calls + 1;
  END;
  CREATE TRIGGER IF NOT EXISTS usage_turn_failed AFTER INSERT ON events
  WHEN NEW.type = 'turn.completed' AND (
    json_type(NEW.payload_json, '$.signals_extra.failure') = 'text'
    OR ${p('$.llm_call_count')} = 0
    OR coalesce((SELECT last_call_failed FROM session_summaries WHERE session_id = NEW.session_id), 0) = 1)
  BEGIN
    INSERT INTO usage_hourly (hour_us, model, failed_turns)
    VALUES (${hourOf('NEW.timestamp_us')},
            CASE WHEN ${p('$.llm_call_count')} = 0 THEN '${NO_MODEL}'
                 ELSE coalesce(${sessionModel('NEW.session_id')}, '${NO_MODEL}') END, 1)
    ON CONFLICT (hour_us, model) DO UPDATE SET failed_turns = failed_turns + 1;
  END;
  CREATE TRIGGER IF NOT EXISTS usage_feedback AFTER INSERT ON events
  WHEN NEW.type = 'feedback.explicit' BEGIN
    INSERT INTO usage_hourly (hour_us, model, feedback_up, feedback_down)
    VALUES (${hourOf('NEW.timestamp_us')},
            coalesce(${turnModel(judgedTurn)}, ${sessionModel('NEW.session_id')}, '${NO_MODEL}'),
            ${p('$.rating')} = 'thumbs_up', ${p('$.rating')} = 'thumbs_down')
    ON CONFLICT (hour_us, model) DO UPDATE SET feedback_up = feedback_up + excluded.feedback_up,
      feedback_down = feedback_down + excluded.feedback_down;
  END;
  CREATE TRIGGER IF NOT EXISTS usage_eval AFTER INSERT ON events
  WHEN NEW.type = 'eval.completed' AND json_type(NEW.payload_json, '$.score') IN ('integer', 'real') BEGIN
    INSERT INTO usage_hourly (hour_us, model, eval_count, eval_sum)
    VALUES (${hourOf('NEW.timestamp_us')},
            coalesce(${turnModel(judgedTurn)}, ${sessionModel('NEW.session_id')}, '${NO_MODEL}'), 1, ${p('$.score')})
    ON CONFLICT (hour_us, model) DO UPDATE SET eval_count = eval_count + 1, eval_sum = eval_sum + excluded.eval_sum;
  END;

  -- What was stored before this version (failed turns: those that say so or made no call; a turn whose
  -- last call failed is found per turn), from scratch: the rollup is derived from the events.
  DELETE FROM usage_hourly;
  INSERT INTO usage_hourly (hour_us, model, calls, input_tokens, output_tokens, cost_usd, latency_bins)
    SELECT hour_us, model, sum(calls), sum(input_tokens), sum(output_tokens), sum(cost_usd),
           json_group_object(CAST(bin AS TEXT), calls)
      FROM (SELECT ${hourOf('timestamp_us')} AS hour_us,
                   coalesce(json_extract(payload_json, '$.model'), '${NO_MODEL}') AS model,
                   ${binOf("json_extract(payload_json, '$.latency_ms')")} AS bin, count(*) AS calls,
                   coalesce(sum(json_extract(payload_json, '$.input_tokens')), 0) AS input_tokens,
                   coalesce(sum(json_extract(payload_json, '$.output_tokens')), 0) AS output_tokens,
                   coalesce(sum(json_extract(payload_json, '$.cost_usd')), 0) AS cost_usd
              FROM events WHERE type = 'llm.call_completed' GROUP BY 1, 2, 3)
     GROUP BY hour_us, model;
  INSERT INTO usage_hourly (hour_us, model, failed_calls)
    SELECT ${hourOf('timestamp_us')}, coalesce(json_extract(payload_json, '$.model'), '${NO_MODEL}'), count(*)
      FROM events WHERE type = 'llm.call_failed' AND coalesce(json_extract(payload_json, '$.error_class'), '') != 'cancelled'
     GROUP BY 1, 2
    ON CONFLICT (hour_us, model) DO UPDATE SET failed_calls = failed_calls + excluded.failed_calls;
  INSERT INTO usage_hourly (hour_us, model, failed_turns)
    SELECT hour_us, model, count(*) FROM (
      SELECT ${hourOf('t.timestamp_us')} AS hour_us,
             CASE WHEN json_extract(t.payload_json, '$.llm_call_count') = 0 THEN '${NO_MODEL}'
                  ELSE coalesce(${turnModel('t.turn_id')}, '${NO_MODEL}') END AS model
        FROM events AS t
       WHERE t.type = 'turn.completed' AND (
         json_type(t.payload_json, '$.signals_extra.failure') = 'text'
         OR json_extract(t.payload_json, '$.llm_call_count') = 0
         OR (SELECT c.type FROM events AS c WHERE c.turn_id = t.turn_id
               AND c.type IN ('llm.call_completed', 'llm.call_failed') ORDER BY c.id DESC LIMIT 1) = 'llm.call_failed'))
     GROUP BY 1, 2
    ON CONFLICT (hour_us, model) DO UPDATE SET failed_turns = failed_turns + excluded.failed_turns;
`;
