import type pg from 'pg';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import type { StoredCaps } from '../budget-rows.js';
import {
  type FamilyLoader,
  type FamilyState,
  type LoadedSession,
  type LoadedTurn,
  newestOf,
  RECENT_MESSAGES,
  RECENT_TURNS,
  toSessionRecord,
} from '../family-state.js';
import type { StoredQueue } from '../queue-rows.js';
import {
  COST_EVENT_TYPES,
  type MessageRow,
  type SessionRecord,
  type ToolCallRow,
  toMessage,
  toToolCallRecord,
} from '../session-store.js';
import { costOfAmounts } from './pg-cost.js';
import { BIGINT_AS_NUMBER, inTransaction } from './pg-util.js';

type FamilyRow = SessionRecord & {
  readonly budget_caps_json: string | null;
  readonly spent_usd: number;
  readonly spent_tokens: number;
  readonly queue_json: string | null;
};

const TURN_EDGES = "('turn.started', 'turn.completed', 'turn.cancelled')";
const TURN_ENDS = "('turn.completed', 'turn.cancelled')";

/** Rows of `rows` grouped by their `session_id`, each group in the order the query gave. */
function bySession<T extends { session_id: string }>(rows: readonly T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const group = groups.get(row.session_id);
    if (group === undefined) groups.set(row.session_id, [row]);
    else group.push(row);
  }
  return groups;
}

/**
 * A family read from PostgreSQL (store-port.md step 4 on the step 7 adapter): the family's rows by a
 * recursive query from the root, then one query per kind over all its sessions (`= ANY($1)`, or LATERAL
 * over `unnest($1)` where each session's newest few are wanted): 10 round trips however large the
 * family, in one read-only REPEATABLE READ transaction so every answer is of the same committed state.
 * Each field is what SqliteFamilyLoader answers for the same rows, with the same JavaScript types.
 */
export class PgFamilyLoader implements FamilyLoader {
  constructor(private readonly pool: pg.Pool) {}

  async loadFamily(rootSessionId: string): Promise<FamilyState | null> {
    if (rootSessionId === SYSTEM_SESSION_ID) return null;
    return inTransaction(
      this.pool,
      (client) => this.load(client, rootSessionId),
      'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
    );
  }

  private async load(client: pg.ClientBase, rootSessionId: string): Promise<FamilyState | null> {
    const rows = async <T>(text: string, values: unknown[]): Promise<T[]> =>
      (await client.query({ text, values, types: BIGINT_AS_NUMBER })).rows as T[];
    const family = await rows<FamilyRow>(
      `WITH RECURSIVE family AS (
         SELECT s.*, 0 AS depth FROM sessions s WHERE s.id = $1
         UNION ALL
         SELECT c.*, f.depth + 1 FROM sessions c JOIN family f ON c.parent_session_id = f.id)
       SELECT * FROM family ORDER BY depth, id`,
      [rootSessionId],
    );
    if (family.length === 0) return null;
    const ids = family.map((row) => row.id);
    const counts = await rows<{
      session_id: string;
      last_event_id: string;
      last_seq: number;
      turn_count: number;
    }>(
      `SELECT session_id, max(id) AS last_event_id, max(seq) AS last_seq,
              count(*) FILTER (WHERE type = 'turn.started') AS turn_count
         FROM events WHERE session_id = ANY($1) GROUP BY session_id`,
      [ids],
    );
    // Each session's newest rows of a kind walk its (session_id, id) index backwards and stop at the
    // limit (LATERAL ... LIMIT), rather than number all its rows as a window function would.
    const lastEdges = await rows<{ session_id: string; type: string; turn_id: string | null }>(
      `SELECT f.session_id, e.type, e.turn_id FROM unnest($1::text[]) AS f(session_id)
         CROSS JOIN LATERAL (SELECT type, turn_id FROM events WHERE session_id = f.session_id
                               AND type IN ${TURN_EDGES} ORDER BY id DESC LIMIT 1) e`,
      [ids],
    );
    const turns = await rows<LoadedTurn & { session_id: string }>(
      `SELECT f.session_id, t.turn_id AS "turnId", t.id AS "startedId",
              (SELECT min(e.id) FROM events e WHERE e.session_id = f.session_id AND e.turn_id = t.turn_id
                  AND e.type IN ${TURN_ENDS}) AS "endedId"
         FROM unnest($1::text[]) AS f(session_id)
         CROSS JOIN LATERAL (SELECT turn_id, id FROM events WHERE session_id = f.session_id
                               AND type = 'turn.started' AND turn_id IS NOT NULL ORDER BY id DESC LIMIT $2) t
        ORDER BY f.session_id, t.id`,
      [ids, RECENT_TURNS],
    );
    const costs = await rows<{ session_id: string; type: string; amount: string | null }>(
      `SELECT session_id, type, CASE type WHEN 'llm.call_completed' THEN payload_json::json ->> 'cost_usd'
                                   ELSE payload_json::json ->> 'worker_total_cost_usd' END AS amount
         FROM events WHERE session_id = ANY($1) AND type = ANY($2) ORDER BY session_id, id`,
      [ids, COST_EVENT_TYPES],
    );
    // Message ids are `msg_` and a ULID, which every collation orders as SQLite does (PgOpenWork too).
    const messages = await rows<MessageRow>(
      `SELECT m.id, m.session_id, m.turn_id, m.role, m.content_json, m.status, m.model, m.usage_json,
              m.created_at_us
         FROM unnest($1::text[]) AS f(session_id)
         CROSS JOIN LATERAL (SELECT * FROM messages WHERE session_id = f.session_id
                               ORDER BY id DESC LIMIT $2) m
        ORDER BY m.session_id, m.id`,
      [ids, RECENT_MESSAGES],
    );
    const openCalls = await rows<ToolCallRow>(
      `SELECT * FROM tool_calls WHERE session_id = ANY($1) AND status IN ('pending', 'running')
        ORDER BY row_id`,
      [ids],
    );
    const routed = await rows<{ session_id: string; model: string | null }>(
      `SELECT f.session_id, r.model FROM unnest($1::text[]) AS f(session_id)
         CROSS JOIN LATERAL (
           SELECT coalesce(payload_json::json ->> 'chosen_model', payload_json::json ->> 'new_chosen_model') AS model
             FROM events WHERE session_id = f.session_id AND type IN ('route.decided', 'route.overridden')
            ORDER BY id DESC LIMIT 1) r`,
      [ids],
    );

    const countsOf = new Map(counts.map((row) => [row.session_id, row]));
    const edgeOf = new Map(lastEdges.map((row) => [row.session_id, row]));
    const turnsOf = bySession(turns);
    const costsOf = bySession(costs);
    const messagesOf = bySession(messages);
    const callsOf = bySession(openCalls);
    const routedOf = new Map(routed.map((row) => [row.session_id, row.model]));
    const sessions = family.map((row): LoadedSession => {
      const id = row.id;
      const count = countsOf.get(id);
      const edge = edgeOf.get(id);
      return {
        row: toSessionRecord(row),
        turnCount: count?.turn_count ?? 0,
        currentTurnId: edge?.type === 'turn.started' ? edge.turn_id : null,
        recentTurns: (turnsOf.get(id) ?? []).map(({ turnId, startedId, endedId }) => ({
          turnId,
          startedId,
          endedId,
        })),
        lastEventId: count?.last_event_id ?? null,
        lastSeq: count?.last_seq ?? 0,
        storedCost: costOfAmounts(costsOf.get(id) ?? []),
        recentMessages: (messagesOf.get(id) ?? []).map(toMessage),
        openToolCalls: (callsOf.get(id) ?? []).map(toToolCallRecord),
        childIds: family.filter((child) => child.parent_session_id === id).map((child) => child.id),
        lastRoutedModel: routedOf.get(id) ?? null,
        budgetCaps: row.budget_caps_json === null ? null : (JSON.parse(row.budget_caps_json) as StoredCaps),
        spent: { usd: row.spent_usd, tokens: row.spent_tokens },
        queue: row.queue_json === null ? null : (JSON.parse(row.queue_json) as StoredQueue),
      };
    });
    return { rootSessionId, sessions, newestEventId: newestOf(sessions) };
  }
}
