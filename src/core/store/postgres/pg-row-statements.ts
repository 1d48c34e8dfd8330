import type { RowChange, RowChangeKind, ToolCallInsert, ToolCallUpdate } from '../row-change.js';

/** A statement of the applier; `name` prepares it once per connection (its text never varies). */
export interface PgStatement {
  readonly name: string;
  readonly text: string;
  readonly values: readonly unknown[];
}

/** A call's row, as an update finds it (nulls equal); the same for the insert that makes it. */
export function callKeyOf(change: ToolCallInsert | ToolCallUpdate): string {
  return JSON.stringify([change.sessionId, change.turnId, change.messageId, change.id]);
}

type Change<K extends RowChangeKind> = Extract<RowChange, { kind: K }>;

interface Rendering<K extends RowChangeKind> {
  /**
   * The row a change writes, for kinds whose statement joins its rows by key: PostgreSQL refuses to
   * upsert one row twice in a statement and an UPDATE … FROM applies only one of two matches, so two
   * changes of a key go in separate statements, in order (pg-row-schedule.ts `layersOf`). A kind whose
   * statement applies a key's changes in turn itself (`budget.spend`) has none.
   */
  readonly keyOf?: (change: Change<K>) => string;
  /** Each change alone: what it touches depends on what the change before it left (or it is rare). */
  readonly alone?: true;
  /** The statements of a run of changes of this kind (one unless said), in the order they run. */
  readonly render: (changes: readonly Change<K>[]) => readonly PgStatement[];
}

/** One run of `changes` as one statement, each column's values an array of the run. */
function arrays<K extends RowChangeKind>(
  name: string,
  text: string,
  columns: readonly ((change: Change<K>) => unknown)[],
): (changes: readonly Change<K>[]) => readonly PgStatement[] {
  return (changes) => [
    { name: `metis_rows_${name}`, text, values: columns.map((column) => changes.map(column)) },
  ];
}

/** Fingerprints with no outcome left go with the outcomes (pattern-rows.ts), including ones empty before. */
const DELETE_EMPTY_FINGERPRINTS = `DELETE FROM pattern_fingerprints f
   WHERE NOT EXISTS (SELECT 1 FROM pattern_outcomes o
                      WHERE o.fingerprint_id = f.id AND o.id NOT IN (SELECT id FROM gone))`;

/**
 * Each kind as PostgreSQL statements with SqliteRowApplier's effect (sqlite-row-applier.ts). The
 * differences are PostgreSQL's: `IS NOT DISTINCT FROM` for SQLite's `IS`, `greatest` for its two-argument
 * `max`, `ON CONFLICT DO NOTHING` for `INSERT OR IGNORE`, a key the store chooses taken from the
 * identity's sequence (SQLite takes max + 1: the same on a store only ever written one way), and the
 * second statement of a pattern delete folded in with a data-modifying CTE (whose snapshot does not
 * see the CTE's deletes, hence the `gone` ids).
 */
export const PG_ROW_RENDERINGS: { readonly [K in Exclude<RowChangeKind, 'handoff.settle'>]: Rendering<K> } = {
  'session.create': {
    keyOf: (c) => c.sessionId,
    render: arrays(
      'session_create',
      `INSERT INTO sessions (id, parent_session_id, workspace_path, workspace_hash, active_model, sticky_model,
                             created_at_us, updated_at_us)
       SELECT id, parent, path, hash, model, sticky, at_us, at_us
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
              AS c(id, parent, path, hash, model, sticky, at_us)
       ON CONFLICT (id) DO UPDATE SET parent_session_id = excluded.parent_session_id,
         workspace_path = excluded.workspace_path, workspace_hash = excluded.workspace_hash,
         active_model = excluded.active_model, sticky_model = excluded.sticky_model,
         updated_at_us = excluded.updated_at_us`,
      [
        (c) => c.sessionId,
        (c) => c.parentSessionId,
        (c) => c.workspacePath,
        (c) => c.workspaceHash,
        (c) => c.activeModel,
        (c) => c.stickyModel,
        (c) => c.atUs,
      ],
    ),
  },
  'session.sticky': {
    keyOf: (c) => c.sessionId,
    render: arrays(
      'session_sticky',
      `UPDATE sessions s SET active_model = c.model, sticky_model = c.model, updated_at_us = c.at_us
         FROM unnest($1::text[], $2::text[], $3::bigint[]) AS c(id, model, at_us) WHERE s.id = c.id`,
      [(c) => c.sessionId, (c) => c.model, (c) => c.atUs],
    ),
  },
  'session.end': {
    keyOf: (c) => c.sessionId,
    render: arrays(
      'session_end',
      `UPDATE sessions s SET status = 'ended', disposition = c.disposition, updated_at_us = c.at_us
         FROM unnest($1::text[], $2::text[], $3::bigint[]) AS c(id, disposition, at_us) WHERE s.id = c.id`,
      [(c) => c.sessionId, (c) => c.disposition, (c) => c.atUs],
    ),
  },
  'message.upsert': {
    keyOf: (c) => c.id,
    render: arrays(
      'message_upsert',
      `INSERT INTO messages (id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                            $8::text[], $9::bigint[])
       ON CONFLICT (id) DO UPDATE SET content_json = excluded.content_json, status = excluded.status,
         usage_json = excluded.usage_json`,
      [
        (c) => c.id,
        (c) => c.sessionId,
        (c) => c.turnId,
        (c) => c.role,
        (c) => c.contentJson,
        (c) => c.status,
        (c) => c.model,
        (c) => c.usageJson,
        (c) => c.createdAtUs,
      ],
    ),
  },
  // No key: a call inserted twice is refused, as in SQLite (the writer then retries items alone).
  'toolCall.insert': {
    render: arrays(
      'tool_call_insert',
      `INSERT INTO tool_calls (row_id, id, session_id, turn_id, message_id, tool_name, input_json, status,
                               created_at_us, updated_at_us)
       SELECT coalesce(c.row_id, nextval(pg_get_serial_sequence('tool_calls', 'row_id'))), c.id, c.session_id,
              c.turn_id, c.message_id, c.tool_name, c.input_json, c.status, c.at_us, c.at_us
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::bigint[])
              AS c(row_id, id, session_id, turn_id, message_id, tool_name, input_json, status, at_us)`,
      [
        (c) => c.rowId,
        (c) => c.id,
        (c) => c.sessionId,
        (c) => c.turnId,
        (c) => c.messageId,
        (c) => c.toolName,
        (c) => c.inputJson,
        (c) => c.status,
        (c) => c.atUs,
      ],
    ),
  },
  'toolCall.update': {
    keyOf: callKeyOf,
    // `session_id` and `id` equal: the join uses the (session_id, id) index, which IS NOT DISTINCT FROM cannot.
    render: arrays(
      'tool_call_update',
      `UPDATE tool_calls t SET status = c.status, output_json = coalesce(c.output_json, t.output_json),
              error_class = c.error_class, updated_at_us = c.at_us
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::bigint[])
              AS c(session_id, turn_id, message_id, id, status, output_json, error_class, at_us)
        WHERE t.session_id = c.session_id AND t.id = c.id
          AND t.turn_id IS NOT DISTINCT FROM c.turn_id AND t.message_id IS NOT DISTINCT FROM c.message_id`,
      [
        (c) => c.sessionId,
        (c) => c.turnId,
        (c) => c.messageId,
        (c) => c.id,
        (c) => c.status,
        (c) => c.outputJson,
        (c) => c.errorClass,
        (c) => c.atUs,
      ],
    ),
  },
  // A session-wide close and a turn's close may match one call: the first one applied closes it.
  'toolCall.closeOpen': {
    alone: true,
    render: ([c]) => [
      {
        name: 'metis_rows_tool_call_close_open',
        text: `UPDATE tool_calls SET status = $1, error_class = $2, output_json = coalesce(output_json, $3),
                      updated_at_us = $4
                WHERE session_id = $5 AND ($6::text IS NULL OR turn_id = $6) AND status IN ('pending', 'running')`,
        values: [c!.status, c!.errorClass, c!.outputJson, c!.atUs, c!.sessionId, c!.turnId],
      },
    ],
  },
  'budget.caps': {
    keyOf: (c) => c.sessionId,
    render: arrays(
      'budget_caps',
      `UPDATE sessions s SET budget_caps_json = c.caps_json
         FROM unnest($1::text[], $2::text[]) AS c(id, caps_json) WHERE s.id = c.id`,
      [(c) => c.sessionId, (c) => c.capsJson],
    ),
  },
  // A session's spends of the run in one statement, added one after the other from the stored value as
  // SQLite adds them (float8 `sum` with ORDER BY is that left fold: its step is `+`), so that many
  // spends of a session in a batch are not as many statements.
  'budget.spend': {
    render: arrays(
      'budget_spend',
      `WITH c AS (SELECT * FROM unnest($1::text[], $2::float8[], $3::bigint[]) WITH ORDINALITY AS c(id, usd, tokens, n))
       UPDATE sessions s
          SET spent_usd = (SELECT sum(added.usd ORDER BY added.n)
                             FROM (SELECT s.spent_usd AS usd, 0::bigint AS n
                                   UNION ALL SELECT c.usd, c.n FROM c WHERE c.id = s.id) AS added),
              spent_tokens = s.spent_tokens + (SELECT sum(c.tokens) FROM c WHERE c.id = s.id)
        WHERE s.id IN (SELECT id FROM c)`,
      [(c) => c.sessionId, (c) => c.usd, (c) => c.tokens],
    ),
  },
  'queue.save': {
    keyOf: (c) => c.sessionId,
    render: arrays(
      'queue_save',
      `UPDATE sessions s SET queue_json = c.queue_json
         FROM unnest($1::text[], $2::text[]) AS c(id, queue_json) WHERE s.id = c.id`,
      [(c) => c.sessionId, (c) => c.queueJson],
    ),
  },
  // The run's fingerprints, then its outcomes: each outcome still finds its fingerprint by key, and
  // outcomes get their keys in the run's order.
  'pattern.insert': {
    render: (changes) => [
      ...arrays<'pattern.insert'>(
        'pattern_fingerprints',
        `INSERT INTO pattern_fingerprints (id, key, kind, features_json, created_at_us)
         SELECT id, key, 'structural', features_json, at_us
           FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS c(id, key, features_json, at_us)
         ON CONFLICT DO NOTHING`,
        [(c) => c.fingerprintId, (c) => c.key, (c) => c.featuresJson, (c) => c.atUs],
      )(changes),
      ...arrays<'pattern.insert'>(
        'pattern_outcomes',
        `INSERT INTO pattern_outcomes (id, fingerprint_id, model, session_id, score, cost_usd, turns, recorded_at_us)
         SELECT coalesce(c.row_id, nextval(pg_get_serial_sequence('pattern_outcomes', 'id'))),
                (SELECT f.id FROM pattern_fingerprints f WHERE f.key = c.key),
                c.model, c.session_id, c.score, c.cost_usd, c.turns, c.at_us
           FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::float8[],
                       $7::integer[], $8::bigint[])
                AS c(row_id, key, model, session_id, score, cost_usd, turns, at_us)`,
        [
          (c) => c.rowId,
          (c) => c.key,
          (c) => c.model,
          (c) => c.sessionId,
          (c) => c.score,
          (c) => c.costUsd,
          (c) => c.turns,
          (c) => c.atUs,
        ],
      )(changes),
    ],
  },
  'pattern.deleteRecordedBefore': {
    alone: true,
    render: ([c]) => [
      {
        name: 'metis_rows_pattern_delete_before',
        text: `WITH gone AS (DELETE FROM pattern_outcomes WHERE recorded_at_us < $1 RETURNING id)
               ${DELETE_EMPTY_FINGERPRINTS}`,
        values: [c!.cutoffUs],
      },
    ],
  },
  // SQLite reads a negative LIMIT as none; PostgreSQL refuses one and reads NULL as none.
  'pattern.deleteOldest': {
    alone: true,
    render: ([c]) => [
      {
        name: 'metis_rows_pattern_delete_oldest',
        text: `WITH gone AS (DELETE FROM pattern_outcomes WHERE id IN (
                 SELECT id FROM pattern_outcomes ORDER BY id
                  LIMIT CASE WHEN $1::bigint < 0 THEN NULL ELSE $1::bigint END) RETURNING id)
               ${DELETE_EMPTY_FINGERPRINTS}`,
        values: [c!.count],
      },
    ],
  },
  'pattern.deleteAll': {
    alone: true,
    render: () => [
      {
        name: 'metis_rows_pattern_delete_all',
        text: 'WITH outcomes AS (DELETE FROM pattern_outcomes) DELETE FROM pattern_fingerprints',
        values: [],
      },
    ],
  },
  'archive.insert': {
    render: (changes) => {
      const events = changes.flatMap((c) => c.events);
      if (events.length === 0) return [];
      return [
        {
          name: 'metis_rows_archive_insert',
          text: `INSERT INTO stream_events (session_id, id, timestamp_us, event_json)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
                 ON CONFLICT DO NOTHING`,
          values: [
            events.map((e) => e.sessionId),
            events.map((e) => e.id),
            events.map((e) => e.timestampUs),
            events.map((e) => e.eventJson),
          ],
        },
      ];
    },
  },
  // Every session of the change in one statement. The INSERT does not see the CTE's deletes, so it
  // names the kept rows by the condition the delete did not meet; a session's horizon rises to its
  // oldest kept id (read through the primary key, from where the session's rows start), never falls.
  // SQLite reads OFFSET -1 (keep 0) as 0; PostgreSQL refuses it.
  'archive.prune': {
    alone: true,
    render: ([c]) => [
      {
        name: 'metis_rows_archive_prune',
        text: `WITH s AS MATERIALIZED (
                 SELECT DISTINCT s.session_id,
                        coalesce((SELECT k.id FROM stream_events k WHERE k.session_id = s.session_id
                                   ORDER BY k.id DESC LIMIT 1 OFFSET greatest($3::bigint - 1, 0)), '') AS keep_from
                   FROM unnest($1::text[]) AS s(session_id)),
               pruned AS (
                 DELETE FROM stream_events e USING s
                  WHERE e.session_id = s.session_id AND e.timestamp_us < $2 AND e.id < s.keep_from
                 RETURNING e.session_id)
               INSERT INTO stream_horizon (session_id, before_id)
               SELECT s.session_id, kept.id FROM s
                CROSS JOIN LATERAL (
                  SELECT e.id FROM stream_events e
                   WHERE e.session_id = s.session_id AND (e.timestamp_us >= $2 OR e.id >= s.keep_from)
                   ORDER BY e.id LIMIT 1) AS kept
                WHERE s.session_id IN (SELECT session_id FROM pruned)
               ON CONFLICT (session_id) DO UPDATE
                 SET before_id = greatest(stream_horizon.before_id, excluded.before_id)`,
        values: [[...c!.sessionIds], c!.cutoffUs, c!.keep],
      },
    ],
  },
  'gap.reported': {
    render: arrays(
      'gap_reported',
      `INSERT INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
       ON CONFLICT DO NOTHING`,
      [(c) => c.sessionId, (c) => c.gapStartId, (c) => c.gapEndId, (c) => c.missingCount, (c) => c.atUs],
    ),
  },
  // Rare (a user's action): each alone, a clear and a set being different statements.
  'title.set': {
    alone: true,
    render: ([c]) => [
      c!.title === null
        ? {
            name: 'metis_rows_title_clear',
            text: 'DELETE FROM session_titles WHERE session_id = $1',
            values: [c!.sessionId],
          }
        : {
            name: 'metis_rows_title_set',
            text: `INSERT INTO session_titles (session_id, title, set_at_us) VALUES ($1, $2, $3)
                   ON CONFLICT (session_id) DO UPDATE SET title = excluded.title, set_at_us = excluded.set_at_us`,
            values: [c!.sessionId, c!.title, c!.atUs],
          },
    ],
  },
};
