import type { Actor, MetisEvent } from '../events/envelope.js';
import type { Db } from './database.js';
import {
  EVENT_COLUMNS,
  EVENT_JSON_SQL,
  type EventJsonRow,
  type EventRow,
  rowToEvent,
  rowToJson,
} from './event-rows.js';
import { SqliteTraceLookups } from './trace-lookups.js';

export interface ReplayQuery {
  /** One session, or several (a planner and its workers). */
  readonly sessionIds: readonly string[];
  /** Only events with an id greater than this cursor; null replays from the start. */
  readonly afterId: string | null;
  readonly eventTypes?: readonly string[] | null;
  readonly actors?: readonly Actor[] | null;
  /** At most this many rows; `tooLarge` says whether more would have matched. */
  readonly limit: number;
}

export interface ReplayResult<Row = EventRow> {
  readonly rows: readonly Row[];
  readonly tooLarge: boolean;
}

/** The two statements of one replay shape: one session (the common case), or several. */
interface ReplayStatements {
  readonly one: Statement;
  readonly many: Statement;
}

type Statement = ReturnType<Db['prepare']>;

/**
 * Replay statements selecting `columns`. json_each lets one prepared statement take any number of
 * sessions, types and actors; a null list means "all" for types and actors. For one session the primary
 * key (session_id, id) yields rows already in id order, so SQLite reads them in place instead of copying
 * every row into a sorter first.
 */
function prepareReplay(db: Db, columns: string): ReplayStatements {
  const rest = `AND id > @after
    AND (@types IS NULL OR type IN (SELECT value FROM json_each(@types)))
    AND (@actors IS NULL OR actor IN (SELECT value FROM json_each(@actors)))
    ORDER BY id
    LIMIT @limit`;
  return {
    one: db.prepare(`SELECT ${columns} FROM events WHERE session_id = @session ${rest}`).raw(),
    many: db
      .prepare(
        `SELECT ${columns} FROM events WHERE session_id IN (SELECT value FROM json_each(@sessions)) ${rest}`,
      )
      .raw(),
  };
}

/**
 * Read queries over the trace store (bus spec §5.3, §7). Every query is served by an index; rows come
 * back raw so callers can forward `payload_json` without re-encoding it.
 */
export class TraceStore {
  private readonly replayRows: ReplayStatements;
  private readonly replayJsonRows: ReplayStatements;
  private readonly sessionEventsStatement;
  private readonly lastSeqStatement;
  private readonly lastIdStatement;
  private readonly eventByIdStatement;
  private readonly chainStatement;
  /** Point questions about turns, sessions and confirmations (the store port's lookups). */
  readonly lookups: SqliteTraceLookups;

  constructor(readonly db: Db) {
    this.lookups = new SqliteTraceLookups(db);
    this.replayRows = prepareReplay(db, EVENT_COLUMNS);
    this.replayJsonRows = prepareReplay(db, `id, ${EVENT_JSON_SQL}`);
    this.sessionEventsStatement = db
      .prepare(`SELECT ${EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY id`)
      .raw();
    this.lastSeqStatement = db
      .prepare('SELECT seq FROM events WHERE session_id = ? ORDER BY id DESC LIMIT 1')
      .pluck();
    this.lastIdStatement = db.prepare('SELECT max(id) FROM events').pluck();
    this.eventByIdStatement = db.prepare(`SELECT ${EVENT_COLUMNS} FROM events WHERE id = ?`).raw();
    this.chainStatement = db
      .prepare(
        `WITH RECURSIVE chain(id, depth) AS (
           SELECT ?, 0
           UNION ALL
           SELECT e.parent_event_id, chain.depth + 1 FROM events e JOIN chain ON e.id = chain.id
           WHERE e.parent_event_id IS NOT NULL AND chain.depth < 10000
         )
         SELECT ${EVENT_COLUMNS} FROM chain JOIN events USING (id) ORDER BY chain.depth`,
      )
      .raw();
  }

  /** Events after a cursor, in id order, capped at `limit` (streaming spec §3.6). */
  replay(query: ReplayQuery): ReplayResult {
    return runReplay<EventRow>(this.replayRows, query);
  }

  /** As replay, each event as its id and its envelope JSON, ready to frame: the streaming server's path. */
  replayJson(query: ReplayQuery): ReplayResult<EventJsonRow> {
    const result = runReplay<[string, string | null]>(this.replayJsonRows, query);
    if (result.rows.every((row) => row[1] !== null)) return result as ReplayResult<EventJsonRow>;
    // A timestamp SQLite cannot format (see EVENT_JSON_SQL): encode those rows here.
    const rows = result.rows.map(([id, json]): EventJsonRow => {
      if (json !== null) return [id, json];
      return [id, rowToJson(this.eventByIdStatement.get(id) as EventRow)];
    });
    return { rows, tooLarge: result.tooLarge };
  }

  /** Every stored event of a session, in id order. */
  sessionEvents(sessionId: string): MetisEvent[] {
    return (this.sessionEventsStatement.all(sessionId) as EventRow[]).map(rowToEvent);
  }

  getEvent(id: string): MetisEvent | null {
    const row = this.eventByIdStatement.get(id) as EventRow | undefined;
    return row ? rowToEvent(row) : null;
  }

  /** The causal chain from an event back to its root (bus spec §4.3), starting with the event itself. */
  causalChain(eventId: string): MetisEvent[] {
    return (this.chainStatement.all(eventId) as EventRow[]).map(rowToEvent);
  }

  /** Every session's events (the system session's aside) committed after `id` (all when null), in id order. */
  eventsAfter(id: string | null): MetisEvent[] {
    return (
      this.db
        .prepare(`SELECT ${EVENT_COLUMNS} FROM events WHERE id > ? AND session_id <> 'system' ORDER BY id`)
        .raw()
        .all(id ?? '') as EventRow[]
    ).map(rowToEvent);
  }

  /** Highest `seq` stored for a session (0 when none): seeds the bus's counter after a restart. */
  lastSeq(sessionId: string): number {
    return (this.lastSeqStatement.get(sessionId) as number | undefined) ?? 0;
  }

  /** Newest event id in the store: seeds the id generator so ids stay monotonic across restarts. */
  lastEventId(): string | null {
    return (this.lastIdStatement.get() as string | null) ?? null;
  }

  /** Id and type of the oldest event kept for a session, for `cursor_expired` after a prune. */
  getOldestKept(sessionId: string): { id: string; type: string } | null {
    return (
      (this.db
        .prepare('SELECT id, type FROM events WHERE session_id = ? ORDER BY id LIMIT 1')
        .get(sessionId) as { id: string; type: string } | undefined) ?? null
    );
  }

  /**
   * The cutoff of the newest retention sweep (`trace.swept.cutoff_timestamp`) in unix ms, or null when
   * the store was never pruned: every non-audit event older than it is gone.
   */
  lastSweepCutoffMs(): number | null {
    const cutoff = this.db
      .prepare(
        `SELECT json_extract(payload_json, '$.cutoff_timestamp') FROM events
         WHERE type = 'trace.swept' ORDER BY timestamp_us DESC LIMIT 1`,
      )
      .pluck()
      .get() as string | undefined;
    return cutoff === undefined ? null : Date.parse(cutoff);
  }
}

function runReplay<Row>(statements: ReplayStatements, query: ReplayQuery): ReplayResult<Row> {
  const filters = {
    after: query.afterId ?? '',
    types: query.eventTypes ? JSON.stringify(query.eventTypes) : null,
    actors: query.actors ? JSON.stringify(query.actors) : null,
    limit: query.limit + 1,
  };
  const rows = (
    query.sessionIds.length === 1
      ? statements.one.all({ ...filters, session: query.sessionIds[0] })
      : statements.many.all({ ...filters, sessions: JSON.stringify(query.sessionIds) })
  ) as Row[];
  const tooLarge = rows.length > query.limit;
  if (tooLarge) rows.length = query.limit;
  return { rows, tooLarge };
}
