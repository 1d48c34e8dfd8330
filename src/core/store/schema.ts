/**
 * Forward-only migrations, keyed by `PRAGMA user_version`. Migration N brings a database from version
 * N-1 to N; never edit a shipped migration, add the next one.
 *
 * Layout note: the spec's `events` columns are kept (bus §7.1, plus `seq`), but the table is clustered
 * on `(session_id, id)` (WITHOUT ROWID) so that replaying one session reads contiguous pages instead of
 * rows scattered among every other session's. `id` stays unique through its own index.
 */
import type Database from 'better-sqlite3';
import { SESSION_INDEX_MIGRATION } from './session-index-schema.js';

/** SQL to run, or a step that looks first (SQLite has no `ADD COLUMN IF NOT EXISTS`). */
export type Migration = string | ((db: Database.Database) => void);

/**
 * Adds the columns the table lacks: a migration that also applies to a database whose version number
 * was set back by hand (the migration tests do), as the `IF NOT EXISTS` of the others does.
 */
function addColumns(table: string, columns: readonly string[]): (db: Database.Database) => void {
  return (db) => {
    const present = new Set(
      db.prepare(`SELECT name FROM pragma_table_info('${table}')`).pluck().all() as string[],
    );
    for (const column of columns)
      if (!present.has(column.split(' ')[0]!)) db.exec(`ALTER TABLE ${table} ADD COLUMN ${column}`);
  };
}

export const MIGRATIONS: readonly Migration[] = [
  `
  CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    parent_session_id TEXT REFERENCES sessions(id),
    workspace_path TEXT,
    workspace_hash TEXT,
    active_model TEXT,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    disposition TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL
  );

  CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    timestamp_us INTEGER NOT NULL,
    turn_id TEXT,
    parent_event_id TEXT,
    type TEXT NOT NULL,
    actor TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
  ) WITHOUT ROWID;

  CREATE UNIQUE INDEX idx_events_id ON events(id);
  CREATE INDEX idx_events_type_timestamp ON events(type, timestamp_us);
  CREATE INDEX idx_events_turn ON events(turn_id);
  CREATE INDEX idx_events_parent ON events(parent_event_id);

  CREATE TABLE messages (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn_id TEXT,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('complete', 'cancelled', 'error')),
    model TEXT,
    usage_json TEXT,
    created_at_us INTEGER NOT NULL
  );
  CREATE INDEX idx_messages_session ON messages(session_id, id);

  CREATE TABLE tool_calls (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn_id TEXT,
    message_id TEXT,
    tool_name TEXT NOT NULL,
    input_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    output_json TEXT,
    error_class TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL
  );
  CREATE INDEX idx_tool_calls_session ON tool_calls(session_id, id);

  -- Gap detection state: the last event verified per session, and every gap already reported.
  CREATE TABLE gap_scan_state (
    session_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    last_id TEXT NOT NULL
  );
  CREATE TABLE gap_scan_watermark (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    last_id TEXT NOT NULL
  );
  CREATE TABLE reported_gaps (
    session_id TEXT NOT NULL,
    gap_start_id TEXT NOT NULL,
    gap_end_id TEXT NOT NULL,
    missing_count INTEGER NOT NULL,
    reported_at_us INTEGER NOT NULL,
    PRIMARY KEY (session_id, gap_start_id)
  );

  -- Process-level events (bus.subscriber_registered, trace.swept) belong to this sentinel session.
  INSERT INTO sessions (id, status, created_at_us, updated_at_us) VALUES ('system', 'active', 0, 0);
  `,
  // 2: the model a user pinned (manual_sticky), so a session resumed by a new process routes as before.
  // Sessions written by version 1 get the model they were created with, the only pin it recorded then.
  `
  ALTER TABLE sessions ADD COLUMN sticky_model TEXT;
  UPDATE sessions SET sticky_model = (
    SELECT json_extract(payload_json, '$.initial_active_model') FROM events
    WHERE events.session_id = sessions.id AND events.type = 'session.created'
    ORDER BY events.id LIMIT 1
  ) WHERE parent_session_id IS NULL;
  `,
  // 3: a provider's tool_use id is unique only within its message (an OpenAI-compatible server may
  // answer `call_1` in every turn), so it no longer keys the table: rows get their own id, and
  // (session, turn, message, provider id) is what is unique. Rows keep their order.
  `
  CREATE TABLE tool_calls_v3 (
    row_id INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn_id TEXT,
    message_id TEXT,
    tool_name TEXT NOT NULL,
    input_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    output_json TEXT,
    error_class TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL
  );
  INSERT INTO tool_calls_v3 (id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
                             error_class, created_at_us, updated_at_us)
    SELECT id, session_id, turn_id, message_id, tool_name, input_json, status, output_json,
           error_class, created_at_us, updated_at_us
    FROM tool_calls ORDER BY created_at_us, id;
  DROP TABLE tool_calls;
  ALTER TABLE tool_calls_v3 RENAME TO tool_calls;
  CREATE UNIQUE INDEX idx_tool_calls_key ON tool_calls(session_id, turn_id, message_id, id);
  CREATE INDEX idx_tool_calls_session ON tool_calls(session_id, id);
  CREATE INDEX idx_tool_calls_open ON tool_calls(status) WHERE status IN ('pending', 'running');
  `,
  // 4 (issue 12): gap detection per session. Each session is verified from its own cursor by `seq`
  // (the index), so a row that commits late with a lower id than rows already scanned is still read;
  // the global id watermark that skipped such rows goes. `owner_handoffs` holds events another process
  // (a `metis trace prune` beside a live server) asks the database's owner to emit, so that only the
  // owner of a session writes into it (DESIGN.md "A session has one owner"). IF (NOT) EXISTS: it must
  // also apply to a database whose version number was set back by hand (the migration tests do).
  `
  DROP TABLE IF EXISTS gap_scan_watermark;
  CREATE INDEX IF NOT EXISTS idx_events_session_seq ON events(session_id, seq);
  CREATE TABLE IF NOT EXISTS owner_handoffs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    type TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at_us INTEGER NOT NULL
  );
  `,
  // 5 (issue 14): streaming events are never in `events`, but a client that reconnects must get the
  // deltas it missed, after a restart too. The recent ones of each session are kept here (at least the
  // last 10 minutes or the newest 10,000, whichever is more; stream/stream-archive.ts prunes the rest).
  `
  CREATE TABLE IF NOT EXISTS stream_events (
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    timestamp_us INTEGER NOT NULL,
    event_json TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
  ) WITHOUT ROWID;
  -- Per session, the id before which streaming events may be missing (pruned, or from before this
  -- table existed): a replay from a cursor older than it cannot bring every delta, and says so.
  CREATE TABLE IF NOT EXISTS stream_horizon (
    session_id TEXT PRIMARY KEY,
    before_id TEXT NOT NULL
  ) WITHOUT ROWID;
  INSERT OR IGNORE INTO stream_horizon (session_id, before_id)
    SELECT session_id, max(id) FROM events GROUP BY session_id;
  `,
  // 6 (issue 18): the pattern store of pattern routing (runtime/patterns/pattern-store.ts). Outcomes
  // are learnings, not a session's record: they outlive the sessions they came from (no foreign key to
  // sessions, untouched by `trace prune`) and are bounded by their own caps and age.
  `
  CREATE TABLE IF NOT EXISTS pattern_fingerprints (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    features_json TEXT NOT NULL,
    created_at_us INTEGER NOT NULL
  );
  CREATE TABLE IF NOT EXISTS pattern_outcomes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint_id TEXT NOT NULL REFERENCES pattern_fingerprints(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    session_id TEXT NOT NULL,
    score REAL,
    cost_usd REAL NOT NULL,
    turns INTEGER NOT NULL,
    recorded_at_us INTEGER NOT NULL
  );
  CREATE INDEX IF NOT EXISTS idx_pattern_outcomes_fingerprint ON pattern_outcomes(fingerprint_id, id);
  CREATE INDEX IF NOT EXISTS idx_pattern_outcomes_age ON pattern_outcomes(recorded_at_us);
  `,
  // 7 (issue 30): the session list's summaries, user titles, message text index and the usage rollup.
  SESSION_INDEX_MIGRATION,
  // 8 (issue 31): budgets outlive the process. The caps a request set (null: the configured ones
  // apply) and what the session's model calls cost as billed, estimates of cut calls included, which
  // the events alone cannot give back. On the session's row, so that they ship, copy and move with it.
  addColumns('sessions', [
    'budget_caps_json TEXT',
    'spent_usd REAL NOT NULL DEFAULT 0',
    'spent_tokens INTEGER NOT NULL DEFAULT 0',
  ]),
  // 9 (issue 31): messages queued while a turn ran (multitask enqueue, interrupt, steer) outlive the
  // process: a 202 "queued" is kept like a turn is, and the next start or a take-over serves it.
  addColumns('sessions', ['queue_json TEXT']),
  // 10 (issue 35): a session's workers found by index. Every subscribe walks the delegation tree down
  // (selfAndDescendants), one lookup per session of the tree, which scanned all sessions.
  'CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)',
];

export const SCHEMA_VERSION = MIGRATIONS.length;
