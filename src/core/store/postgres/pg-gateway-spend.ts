import type { GatewaySpendRow } from '../gateway-spend.js';
import { postgresPool } from './connect.js';
import { checkOut } from './pg-util.js';

const DAY_US = 86_400_000_000;

/** What the store of record holds of the gateway's spend, and which of some calls it holds already. */
export interface StoredSpend {
  /** Sums per key, user, team and UTC day (`timestamp_us` is the day's start). */
  readonly rows: GatewaySpendRow[];
  /** Those of the asked-about event ids that the store holds. */
  readonly present: ReadonlySet<string>;
}

export interface SharedSpendReader {
  read(sinceUs: number, eventIds: readonly string[]): Promise<StoredSpend>;
  close(): Promise<void>;
}

/**
 * The gateway's spend as PostgreSQL holds it, for caps shared by every node of a store: the sums of
 * `llm.call_completed.cost_usd` of gateway calls since `sinceUs`, and which of this node's recent calls
 * are among them, read in one snapshot (REPEATABLE READ), so that a call is counted from the store or
 * from the node's memory, never both and never neither.
 */
export function pgSharedSpend(url: string): SharedSpendReader {
  const pool = postgresPool(url, 'serve', 1);
  return {
    read: async (sinceUs, eventIds) => {
      const { client, release } = await checkOut(pool);
      try {
        await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        const sums = await client.query<{
          gateway_key_id: string;
          user_id: string | null;
          team_id: string | null;
          day: number;
          cost_usd: number;
        }>(
          `SELECT payload_json::jsonb ->> 'gateway_key_id' AS gateway_key_id,
                  payload_json::jsonb ->> 'user_id' AS user_id,
                  payload_json::jsonb ->> 'team_id' AS team_id,
                  timestamp_us / ${DAY_US} AS day,
                  sum((payload_json::jsonb ->> 'cost_usd')::float8) AS cost_usd
             FROM events
            WHERE type = 'llm.call_completed' AND timestamp_us >= $1
              AND payload_json::jsonb ->> 'gateway_key_id' IS NOT NULL
            GROUP BY 1, 2, 3, 4`,
          [sinceUs],
        );
        const present =
          eventIds.length === 0
            ? { rows: [] as { id: string }[] }
            : await client.query<{ id: string }>('SELECT id FROM events WHERE id = ANY($1)', [[...eventIds]]);
        await client.query('COMMIT');
        return {
          rows: sums.rows.map((row) => ({
            timestamp_us: Number(row.day) * DAY_US,
            gateway_key_id: row.gateway_key_id,
            user_id: row.user_id,
            team_id: row.team_id,
            cost_usd: Number(row.cost_usd),
          })),
          present: new Set(present.rows.map((row) => row.id)),
        };
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        release();
      }
    },
    close: () => pool.end(),
  };
}
