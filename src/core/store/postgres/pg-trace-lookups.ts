import type pg from 'pg';
import { type PayloadRow, type TraceLookups, textOfUserContent } from '../trace-lookups.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

const TURN_ENDS = ['turn.completed', 'turn.cancelled'];
const ROUTING = ['route.decided', 'route.overridden'];

/**
 * The trace lookups (trace-lookups.ts) answered by the PostgreSQL store of record, for a server with no
 * working copy (docs/plans/store-port.md step 8): one statement each, on the events' primary key
 * (session_id, id) or the messages' (session_id, id) index. Each answer is SqliteTraceLookups' for
 * the same rows; where SQLite takes the first row an index gives, this takes the lowest id.
 */
export class PgTraceLookups implements TraceLookups {
  constructor(private readonly pool: pg.Pool) {}

  private async first<T>(text: string, values: unknown[]): Promise<T | undefined> {
    return (await this.pool.query({ text, values, types: BIGINT_AS_NUMBER })).rows[0] as T | undefined;
  }

  async turnStartedId(sessionId: string, turnId: string): Promise<string | null> {
    const row = await this.first<{ id: string }>(
      "SELECT id FROM events WHERE session_id = $1 AND turn_id = $2 AND type = 'turn.started' ORDER BY id LIMIT 1",
      [sessionId, turnId],
    );
    return row?.id ?? null;
  }

  async turnEndId(sessionId: string, turnId: string): Promise<string | null> {
    const row = await this.first<{ id: string }>(
      'SELECT id FROM events WHERE session_id = $1 AND turn_id = $2 AND type = ANY($3) ORDER BY id LIMIT 1',
      [sessionId, turnId, TURN_ENDS],
    );
    return row?.id ?? null;
  }

  async sessionEndedId(sessionId: string): Promise<string | null> {
    const row = await this.first<{ id: string }>(
      "SELECT id FROM events WHERE session_id = $1 AND type = 'session.ended' ORDER BY id DESC LIMIT 1",
      [sessionId],
    );
    return row?.id ?? null;
  }

  async eventsOfTypes(sessionId: string, types: readonly string[]): Promise<PayloadRow[]> {
    const result = await this.pool.query<PayloadRow>({
      text: `SELECT id, session_id, timestamp_us, type, turn_id, payload_json FROM events
              WHERE session_id = $1 AND type = ANY($2) ORDER BY id`,
      values: [sessionId, types],
      types: BIGINT_AS_NUMBER,
    });
    return result.rows;
  }

  async userTextOfTurn(sessionId: string, turnId: string): Promise<string | null> {
    const row = await this.first<{ content_json: string }>(
      `SELECT content_json FROM messages WHERE session_id = $1 AND turn_id = $2 AND role = 'user'
        ORDER BY id LIMIT 1`,
      [sessionId, turnId],
    );
    return row === undefined ? null : textOfUserContent(row.content_json);
  }

  async lastRoutedModel(sessionId: string): Promise<string | null> {
    // As the family load reads it (pg-load-family.ts): the newest routing event's model.
    const row = await this.first<{ model: string | null }>(
      `SELECT coalesce(payload_json::json ->> 'chosen_model', payload_json::json ->> 'new_chosen_model') AS model
         FROM events WHERE session_id = $1 AND type = ANY($2) ORDER BY id DESC LIMIT 1`,
      [sessionId, ROUTING],
    );
    return row?.model ?? null;
  }
}
