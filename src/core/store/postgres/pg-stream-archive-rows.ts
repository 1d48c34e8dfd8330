import type pg from 'pg';
import type { MetisEvent } from '../../events/envelope.js';
import type { StoreWriter } from '../store-writer.js';
import { archiveInsert, archivePrune, type StreamArchiveRows } from '../stream-archive-rows.js';

/** A session's archived events after an id, in id order, as SqliteStreamArchiveRows reads them. */
const AFTER_SQL =
  'SELECT event_json FROM stream_events WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3';

/** The JSON of a session's archived events after `afterId`, oldest first (recovery reads it too). */
export async function pgArchivedAfter(
  pool: pg.Pool,
  sessionId: string,
  afterId: string,
  limit: number,
): Promise<string[]> {
  const { rows } = await pool.query<[string]>({
    text: AFTER_SQL,
    values: [sessionId, afterId, limit],
    rowMode: 'array',
  });
  return rows.map((row) => row[0]);
}

/**
 * The stream archive of a server on PostgreSQL with no working copy (docs/plans/store-port.md §2 I,
 * step 8 wires it): reads by SQL over the pool, answering as SqliteStreamArchiveRows does; writes are
 * the same RowChanges, handed to the store's writer, so they commit in its group commit behind the
 * events queued before them.
 */
export class PgStreamArchiveRows implements StreamArchiveRows {
  constructor(
    private readonly pool: pg.Pool,
    private readonly writer: StoreWriter,
  ) {}

  async archivedSessions(): Promise<string[]> {
    const { rows } = await this.pool.query<[string]>({
      text: 'SELECT DISTINCT session_id FROM stream_events ORDER BY session_id',
      rowMode: 'array',
    });
    return rows.map((row) => row[0]);
  }

  write(batch: readonly MetisEvent[], settled: (committed: boolean) => void): void {
    this.writer.writeRow(archiveInsert(batch, settled));
  }

  after(sessionId: string, afterId: string, limit: number): Promise<string[]> {
    return pgArchivedAfter(this.pool, sessionId, afterId, limit);
  }

  async horizon(sessionId: string): Promise<string | undefined> {
    const { rows } = await this.pool.query<[string]>({
      text: 'SELECT before_id FROM stream_horizon WHERE session_id = $1',
      values: [sessionId],
      rowMode: 'array',
    });
    return rows[0]?.[0];
  }

  prune(sessionIds: readonly string[], cutoffUs: number, keep: number): void {
    this.writer.writeRow(archivePrune(sessionIds, cutoffUs, keep));
  }
}
