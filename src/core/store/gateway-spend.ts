import type { Db } from './database.js';

/** One gateway call's cost as stored (`llm.call_completed` with a `gateway_key_id`). */
export interface GatewaySpendRow {
  readonly timestamp_us: number;
  readonly gateway_key_id: string;
  readonly user_id: string | null;
  readonly team_id: string | null;
  readonly cost_usd: number;
}

/**
 * The cost of every gateway call stored since `sinceUs`, for the gateway's quotas to start from (then
 * they count in memory). Walks `idx_events_type_timestamp`: a month of calls, not the whole store.
 */
export function gatewaySpendSince(db: Db, sinceUs: number): GatewaySpendRow[] {
  return db
    .prepare(
      `SELECT timestamp_us,
              json_extract(payload_json, '$.gateway_key_id') AS gateway_key_id,
              json_extract(payload_json, '$.user_id') AS user_id,
              json_extract(payload_json, '$.team_id') AS team_id,
              json_extract(payload_json, '$.cost_usd') AS cost_usd
         FROM events
        WHERE type = 'llm.call_completed' AND timestamp_us >= ?
          AND json_extract(payload_json, '$.gateway_key_id') IS NOT NULL`,
    )
    .all(sinceUs) as GatewaySpendRow[];
}
