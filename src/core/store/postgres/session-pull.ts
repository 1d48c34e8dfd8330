import type pg from 'pg';
import type { Db } from '../database.js';
import { COPIED_TABLES, type CopiedTable } from '../store-copy.js';
import { writePulled } from './working-copy.js';

/** What the store holds of one session and its workers, each table's rows in its columns' order. */
export interface StoredSession {
  readonly sessionIds: readonly string[];
  readonly rows: ReadonlyMap<string, readonly unknown[][]>;
  readonly events: readonly unknown[][];
}

const table = (name: string): CopiedTable => COPIED_TABLES.find((t) => t.name === name)!;
const EVENTS = table('events');
/** The tables a session's rows live in, parents first, with the column naming the session. */
const SESSION_TABLES = [
  [table('sessions'), 'id'],
  [table('messages'), 'session_id'],
  [table('tool_calls'), 'session_id'],
  [table('session_titles'), 'session_id'],
] as const;

/**
 * Reads a session and its worker sessions from the store in one snapshot: its row, messages, tool calls
 * and events. What a node taking the session over brings into its working copy.
 */
export async function readStoredSession(
  client: pg.ClientBase,
  sessionId: string,
  /** Only the events after these per-session seqs (what the copy has already); default all. */
  after: ReadonlyMap<string, number> = new Map(),
): Promise<StoredSession> {
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  try {
    const ids =
      // Workers, and their workers (a delegation may nest): the whole family lives on one node.
      (
        await client.query<{ id: string }>(
          `WITH RECURSIVE family (id) AS (
           SELECT id FROM sessions WHERE id = $1
           UNION SELECT s.id FROM sessions s JOIN family f ON s.parent_session_id = f.id)
         SELECT id FROM family`,
          [sessionId],
        )
      ).rows.map((row) => row.id);
    const rows = new Map<string, unknown[][]>();
    for (const [source, column] of SESSION_TABLES) {
      const result = await client.query({
        text: `SELECT ${source.columns.join(', ')} FROM ${source.name} WHERE ${column} = ANY($1::text[]) ORDER BY ${source.key}`,
        values: [ids],
        rowMode: 'array',
      });
      rows.set(source.name, result.rows as unknown[][]);
    }
    const events = await client.query({
      text: `SELECT ${EVENTS.columns.map((column) => `e.${column}`).join(', ')}
               FROM events e JOIN unnest($1::text[], $2::bigint[]) AS known(session_id, seq)
                 ON e.session_id = known.session_id AND e.seq > known.seq
              ORDER BY e.id`,
      values: [ids, ids.map((id) => after.get(id) ?? -1)],
      rowMode: 'array',
    });
    await client.query('COMMIT');
    return { sessionIds: ids, rows, events: events.rows as unknown[][] };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/**
 * Writes a session read from the store into the working copy, in one transaction that is not shipped
 * back (working-copy.ts `writePulled`): its rows as the store has them, and the events the copy lacks,
 * each listed in `pg_pulled_events` so the shipper's scan by id skips it. Returns how many events were new here and the
 * newest event id.
 */
export function writeStoredSession(
  db: Db,
  stored: StoredSession,
  /**
   * Whether this node may lack the streaming events before the events added (it did not follow the
   * session live): a replay from before them then says it cannot bring them all. Default yes.
   */
  missedStreaming = true,
): { added: number; lastEventId: string | null; addedEvents: unknown[][] } {
  const { upserts, insertEvent, markPulled, raiseHorizon } = pullStatements(db);
  const idIndex = (EVENTS.columns as readonly string[]).indexOf('id');
  const sessionIndex = (EVENTS.columns as readonly string[]).indexOf('session_id');
  const newest = new Map<string, string>();
  const addedEvents: unknown[][] = [];
  writePulled(db, () => {
    for (const [target, upsert] of upserts)
      for (const row of stored.rows.get(target.name) ?? []) upsert.run(row);
    for (const row of stored.events) {
      newest.set(row[sessionIndex] as string, row[idIndex] as string);
      if (insertEvent.run(row).changes === 0) continue;
      markPulled.run(row[idIndex]);
      addedEvents.push(row);
    }
    if (missedStreaming) for (const [session, id] of newest) raiseHorizon.run(session, id);
  });
  return {
    added: addedEvents.length,
    addedEvents,
    lastEventId: (stored.events.at(-1)?.[idIndex] as string | undefined) ?? null,
  };
}

/**
 * The statements writing a pulled session, prepared once per connection: a follower writes one for
 * every event that comes with rows, and preparing them each time was most of that write's cost.
 */
const STATEMENTS = new WeakMap<Db, ReturnType<typeof preparePull>>();

function pullStatements(db: Db): ReturnType<typeof preparePull> {
  let statements = STATEMENTS.get(db);
  if (statements === undefined) {
    statements = preparePull(db);
    STATEMENTS.set(db, statements);
  }
  return statements;
}

function preparePull(db: Db) {
  const upserts = SESSION_TABLES.map(([target]) => {
    const others = target.columns.filter((column) => column !== target.pk);
    const updates = others.map((column) => `${column} = excluded.${column}`).join(', ');
    // A row the copy has as the store has it is left alone (a mirrored session is refreshed often).
    const differs = others.map((column) => `${column} IS NOT excluded.${column}`).join(' OR ');
    return [
      target,
      db.prepare(
        `INSERT INTO ${target.name} (${target.columns.join(', ')}) VALUES (${target.columns.map(() => '?').join(', ')})
         ON CONFLICT (${target.pk}) DO UPDATE SET ${updates} WHERE ${differs}`,
      ),
    ] as const;
  });
  const insertEvent = db.prepare(
    `INSERT OR IGNORE INTO events (${EVENTS.columns.join(', ')}) VALUES (${EVENTS.columns.map(() => '?').join(', ')})`,
  );
  const markPulled = db.prepare('INSERT OR IGNORE INTO pg_pulled_events (id) VALUES (?)');
  // The other node's streaming events (deltas) are not here: a replay from before its last event says
  // it cannot bring them all (stream-archive.ts).
  const raiseHorizon = db.prepare(
    `INSERT INTO stream_horizon (session_id, before_id) VALUES (?, ?)
     ON CONFLICT (session_id) DO UPDATE SET before_id = max(before_id, excluded.before_id)`,
  );
  return { upserts, insertEvent, markPulled, raiseHorizon };
}
