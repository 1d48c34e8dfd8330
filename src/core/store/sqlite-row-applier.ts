import type Database from 'better-sqlite3';
import type { Db } from './database.js';
import type { HandoffSettle, RowChange, RowChangeKind, RowOutcome } from './row-change.js';

type Statement = Database.Statement<unknown[]>;

const SQL = {
  sessionCreate: `INSERT INTO sessions (id, parent_session_id, workspace_path, workspace_hash, active_model, sticky_model,
                               created_at_us, updated_at_us)
         VALUES (@id, @parent, @path, @hash, @model, @sticky, @now, @now)
         ON CONFLICT (id) DO UPDATE SET parent_session_id = excluded.parent_session_id,
           workspace_path = excluded.workspace_path, workspace_hash = excluded.workspace_hash,
           active_model = excluded.active_model, sticky_model = excluded.sticky_model,
           updated_at_us = excluded.updated_at_us`,
  sessionSticky: 'UPDATE sessions SET active_model = ?, sticky_model = ?, updated_at_us = ? WHERE id = ?',
  sessionEnd: "UPDATE sessions SET status = 'ended', disposition = ?, updated_at_us = ? WHERE id = ?",
  messageUpsert: `INSERT INTO messages (id, session_id, turn_id, role, content_json, status, model, usage_json, created_at_us)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET content_json = excluded.content_json, status = excluded.status,
           usage_json = excluded.usage_json`,
  toolCallInsert: `INSERT INTO tool_calls (row_id, id, session_id, turn_id, message_id, tool_name, input_json, status, created_at_us, updated_at_us)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  toolCallUpdate: `UPDATE tool_calls SET status = ?, output_json = coalesce(?, output_json), error_class = ?, updated_at_us = ?
           WHERE session_id = ? AND turn_id IS ? AND message_id IS ? AND id = ?`,
  toolCallCloseOpen: `UPDATE tool_calls SET status = ?, error_class = ?, output_json = coalesce(output_json, ?), updated_at_us = ?
           WHERE session_id = ? AND (? IS NULL OR turn_id = ?) AND status IN ('pending', 'running')`,
  budgetCaps: 'UPDATE sessions SET budget_caps_json = ? WHERE id = ?',
  budgetSpend: 'UPDATE sessions SET spent_usd = spent_usd + ?, spent_tokens = spent_tokens + ? WHERE id = ?',
  queueSave: 'UPDATE sessions SET queue_json = ? WHERE id = ?',
  patternFingerprint: `INSERT OR IGNORE INTO pattern_fingerprints (id, key, kind, features_json, created_at_us)
           VALUES (?, ?, 'structural', ?, ?)`,
  patternOutcome: `INSERT INTO pattern_outcomes (id, fingerprint_id, model, session_id, score, cost_usd, turns, recorded_at_us)
           VALUES (?, (SELECT id FROM pattern_fingerprints WHERE key = ?), ?, ?, ?, ?, ?, ?)`,
  patternDeleteBefore: 'DELETE FROM pattern_outcomes WHERE recorded_at_us < ?',
  patternDeleteOldest:
    'DELETE FROM pattern_outcomes WHERE id IN (SELECT id FROM pattern_outcomes ORDER BY id LIMIT ?)',
  patternDeleteOutcomes: 'DELETE FROM pattern_outcomes',
  patternDeleteFingerprints: 'DELETE FROM pattern_fingerprints',
  patternDeleteEmpty:
    'DELETE FROM pattern_fingerprints WHERE id NOT IN (SELECT DISTINCT fingerprint_id FROM pattern_outcomes)',
  archiveInsert:
    'INSERT OR IGNORE INTO stream_events (session_id, id, timestamp_us, event_json) VALUES (?, ?, ?, ?)',
  archivePrune: `DELETE FROM stream_events WHERE session_id = ? AND timestamp_us < ? AND id < coalesce(
           (SELECT id FROM stream_events WHERE session_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?), '')`,
  archiveRaiseHorizon: `INSERT INTO stream_horizon (session_id, before_id)
           SELECT ?, min(id) FROM stream_events WHERE session_id = ? HAVING min(id) IS NOT NULL
         ON CONFLICT (session_id) DO UPDATE SET before_id = max(before_id, excluded.before_id)`,
  gapReported: `INSERT OR IGNORE INTO reported_gaps (session_id, gap_start_id, gap_end_id, missing_count, reported_at_us)
             VALUES (?, ?, ?, ?, ?)`,
  eventStored: 'SELECT 1 FROM events WHERE id = ?',
  gapStored: 'SELECT 1 FROM reported_gaps WHERE session_id = ? AND gap_start_id = ?',
  handoffDelete: 'DELETE FROM owner_handoffs WHERE id = ?',
  titleClear: 'DELETE FROM session_titles WHERE session_id = ?',
  titleSet: `INSERT INTO session_titles (session_id, title, set_at_us) VALUES (?, ?, ?)
         ON CONFLICT (session_id) DO UPDATE SET title = excluded.title, set_at_us = excluded.set_at_us`,
} as const;

type StatementName = keyof typeof SQL;

/**
 * Applies `RowChange`s to a SQLite store with statements prepared once per connection. It runs each
 * change's statements in order and opens no transaction of its own: the trace writer's batch (or, with
 * no writer, the caller) decides what commits together.
 */
export class SqliteRowApplier {
  /** Prepared on first use: a store opened for one purpose (a test, a copy) may lack other tables. */
  private readonly statements = new Map<StatementName, Statement>();

  constructor(private readonly db: Db) {}

  /** @returns what the change found, for the kinds whose producer waits for it (a handoff settle). */
  apply(change: RowChange): RowOutcome | undefined {
    if (change.kind === 'handoff.settle') return settleHandoffs(this, change.settles);
    APPLY[change.kind](this, change as never);
    return undefined;
  }

  /** Runs the statement named `name` (for the appliers below). */
  run(name: StatementName, ...params: unknown[]): void {
    this.statement(name).run(...params);
  }

  /** Runs the statement named `name`; returns how many rows it changed. */
  changes(name: StatementName, ...params: unknown[]): number {
    return this.statement(name).run(...params).changes;
  }

  /** Whether the query named `name` finds a row (for the appliers below). */
  finds(name: StatementName, ...params: unknown[]): boolean {
    return this.statement(name).get(...params) !== undefined;
  }

  private statement(name: StatementName): Statement {
    let statement = this.statements.get(name);
    if (statement === undefined) {
      statement = this.db.prepare(SQL[name]);
      this.statements.set(name, statement);
    }
    return statement;
  }
}

type Applier<K extends RowChangeKind> = (
  rows: SqliteRowApplier,
  change: Extract<RowChange, { kind: K }>,
) => void;

/** The statements of each kind, in the order the producers ran them before changes were data. */
const APPLY: { readonly [K in Exclude<RowChangeKind, 'handoff.settle'>]: Applier<K> } = {
  'session.create': (rows, c) =>
    rows.run('sessionCreate', {
      id: c.sessionId,
      parent: c.parentSessionId,
      path: c.workspacePath,
      hash: c.workspaceHash,
      model: c.activeModel,
      sticky: c.stickyModel,
      now: c.atUs,
    }),
  'session.sticky': (rows, c) => rows.run('sessionSticky', c.model, c.model, c.atUs, c.sessionId),
  'session.end': (rows, c) => rows.run('sessionEnd', c.disposition, c.atUs, c.sessionId),
  'message.upsert': (rows, c) =>
    rows.run(
      'messageUpsert',
      c.id,
      c.sessionId,
      c.turnId,
      c.role,
      c.contentJson,
      c.status,
      c.model,
      c.usageJson,
      c.createdAtUs,
    ),
  'toolCall.insert': (rows, c) =>
    rows.run(
      'toolCallInsert',
      c.rowId,
      c.id,
      c.sessionId,
      c.turnId,
      c.messageId,
      c.toolName,
      c.inputJson,
      c.status,
      c.atUs,
      c.atUs,
    ),
  'toolCall.update': (rows, c) =>
    rows.run(
      'toolCallUpdate',
      c.status,
      c.outputJson,
      c.errorClass,
      c.atUs,
      c.sessionId,
      c.turnId,
      c.messageId,
      c.id,
    ),
  'toolCall.closeOpen': (rows, c) =>
    rows.run(
      'toolCallCloseOpen',
      c.status,
      c.errorClass,
      c.outputJson,
      c.atUs,
      c.sessionId,
      c.turnId,
      c.turnId,
    ),
  'budget.caps': (rows, c) => rows.run('budgetCaps', c.capsJson, c.sessionId),
  'budget.spend': (rows, c) => rows.run('budgetSpend', c.usd, c.tokens, c.sessionId),
  'queue.save': (rows, c) => rows.run('queueSave', c.queueJson, c.sessionId),
  'pattern.insert': (rows, c) => {
    rows.run('patternFingerprint', c.fingerprintId, c.key, c.featuresJson, c.atUs);
    rows.run('patternOutcome', c.rowId, c.key, c.model, c.sessionId, c.score, c.costUsd, c.turns, c.atUs);
  },
  'pattern.deleteRecordedBefore': (rows, c) => {
    rows.run('patternDeleteBefore', c.cutoffUs);
    rows.run('patternDeleteEmpty');
  },
  'pattern.deleteOldest': (rows, c) => {
    rows.run('patternDeleteOldest', c.count);
    rows.run('patternDeleteEmpty');
  },
  'pattern.deleteAll': (rows) => {
    rows.run('patternDeleteOutcomes');
    rows.run('patternDeleteFingerprints');
  },
  'archive.insert': (rows, c) => {
    for (const event of c.events)
      rows.run('archiveInsert', event.sessionId, event.id, event.timestampUs, event.eventJson);
  },
  'archive.prune': (rows, c) => {
    for (const sessionId of c.sessionIds) {
      if (rows.changes('archivePrune', sessionId, c.cutoffUs, sessionId, c.keep - 1) > 0)
        rows.run('archiveRaiseHorizon', sessionId, sessionId);
    }
  },
  'gap.reported': (rows, c) =>
    rows.run('gapReported', c.sessionId, c.gapStartId, c.gapEndId, c.missingCount, c.atUs),
  'title.set': (rows, c) => {
    if (c.title === null) rows.run('titleClear', c.sessionId);
    else rows.run('titleSet', c.sessionId, c.title, c.atUs);
  },
};

/** Each settle's statements depend on what the ones before them left stored, so they run one by one. */
function settleHandoffs(rows: SqliteRowApplier, settles: readonly HandoffSettle[]): RowOutcome {
  const settledByEvent: number[] = [];
  for (const settle of settles) {
    if (settle.by === 'event') {
      if (!rows.finds('eventStored', settle.eventId)) continue;
      const gap = settle.gap;
      if (gap !== null)
        rows.run('gapReported', gap.sessionId, gap.gapStartId, gap.gapEndId, gap.missingCount, gap.atUs);
      settledByEvent.push(settle.handoffId);
    } else if (settle.by === 'gap' && !rows.finds('gapStored', settle.sessionId, settle.gapStartId)) {
      continue;
    }
    rows.run('handoffDelete', settle.handoffId);
  }
  return { settledByEvent };
}

const APPLIERS = new WeakMap<Db, SqliteRowApplier>();

/** The connection's applier: the trace writer and the writes made with no writer share its statements. */
export function rowApplierOf(db: Db): SqliteRowApplier {
  let applier = APPLIERS.get(db);
  if (applier === undefined) {
    applier = new SqliteRowApplier(db);
    APPLIERS.set(db, applier);
  }
  return applier;
}
