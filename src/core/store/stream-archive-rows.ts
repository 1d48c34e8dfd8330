import { isoToMicros } from '../events/clock.js';
import type { MetisEvent } from '../events/envelope.js';
import { eventJson } from '../events/event-json.js';
import type { RowWrite } from './batch-committer.js';
import type { Db } from './database.js';
import { writeRow } from './trace-writer.js';

/**
 * Where the streaming events of each session's resume window are kept (part of the store port; the
 * archive's policy is stream/stream-archive.ts). Writes are queued with the events of the same tick.
 * Reads are asynchronous, so that a store over the network can answer (docs/plans/store-port.md §2 I);
 * SQLite answers at the call.
 */
export interface StreamArchiveRows {
  /** Sessions with archived events, ordered by session id (a restart prunes each once). */
  archivedSessions(): Promise<string[]>;
  /** Stores a batch; `settled` says whether it was committed (false: refused for good). */
  write(batch: readonly MetisEvent[], settled: (committed: boolean) => void): void;
  /** Envelope JSON of a session's archived events after `afterId` ('' for all), in id order. */
  after(sessionId: string, afterId: string, limit: number): Promise<string[]>;
  /** The oldest id a replay of the session can start after, when some were pruned. */
  horizon(sessionId: string): Promise<string | undefined>;
  /**
   * Drops each session's events older than `cutoffUs` beyond its newest `keep`, and raises the
   * session's horizon past what was dropped.
   */
  prune(sessionIds: readonly string[], cutoffUs: number, keep: number): void;
}

export class SqliteStreamArchiveRows implements StreamArchiveRows {
  private readonly statements;

  constructor(private readonly db: Db) {
    this.statements = {
      after: db
        .prepare('SELECT event_json FROM stream_events WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?')
        .pluck(),
      horizon: db.prepare('SELECT before_id FROM stream_horizon WHERE session_id = ?').pluck(),
    };
  }

  async archivedSessions(): Promise<string[]> {
    return this.db
      .prepare('SELECT DISTINCT session_id FROM stream_events ORDER BY session_id')
      .pluck()
      .all() as string[];
  }

  write(batch: readonly MetisEvent[], settled: (committed: boolean) => void): void {
    writeRow(this.db, archiveInsert(batch, settled));
  }

  async after(sessionId: string, afterId: string, limit: number): Promise<string[]> {
    return this.statements.after.all(sessionId, afterId, limit) as string[];
  }

  async horizon(sessionId: string): Promise<string | undefined> {
    return this.statements.horizon.get(sessionId) as string | undefined;
  }

  prune(sessionIds: readonly string[], cutoffUs: number, keep: number): void {
    writeRow(this.db, archivePrune(sessionIds, cutoffUs, keep));
  }
}

/** The row write that stores a batch of streaming events (every adapter writes the same change). */
export function archiveInsert(batch: readonly MetisEvent[], settled: (committed: boolean) => void): RowWrite {
  const events = batch.map((event) => ({
    sessionId: event.session_id,
    id: event.id,
    timestampUs: isoToMicros(event.timestamp),
    eventJson: eventJson(event),
  }));
  return { what: `${batch.length} streaming events`, change: { kind: 'archive.insert', events }, settled };
}

/** The row write that prunes sessions' archived events to their window (StreamArchiveRows.prune). */
export function archivePrune(sessionIds: readonly string[], cutoffUs: number, keep: number): RowWrite {
  return {
    what: 'pruning streaming events',
    change: { kind: 'archive.prune', sessionIds: [...sessionIds], cutoffUs, keep },
  };
}
