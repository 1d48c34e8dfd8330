import { isoToMicros } from '../events/clock.js';
import type { MetisEvent } from '../events/envelope.js';
import { eventJson } from '../events/event-json.js';
import type { Db } from './database.js';
import { writerOf } from './trace-writer.js';

/**
 * Where the streaming events of each session's resume window are kept (part of the store port; the
 * archive's policy is stream/stream-archive.ts). Writes are queued with the events of the same tick.
 */
export interface StreamArchiveRows {
  /** Sessions with archived events (a restart prunes each once). */
  archivedSessions(): string[];
  /** Stores a batch; `settled` says whether it was committed (false: refused for good). */
  write(batch: readonly MetisEvent[], settled: (committed: boolean) => void): void;
  /** Envelope JSON of a session's archived events after `afterId` ('' for all), in id order. */
  after(sessionId: string, afterId: string, limit: number): string[];
  /** The oldest id a replay of the session can start after, when some were pruned. */
  horizon(sessionId: string): string | undefined;
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
      insert: db.prepare(
        'INSERT OR IGNORE INTO stream_events (session_id, id, timestamp_us, event_json) VALUES (?, ?, ?, ?)',
      ),
      after: db
        .prepare('SELECT event_json FROM stream_events WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?')
        .pluck(),
      horizon: db.prepare('SELECT before_id FROM stream_horizon WHERE session_id = ?').pluck(),
      raiseHorizon: db.prepare(
        `INSERT INTO stream_horizon (session_id, before_id)
           SELECT ?, min(id) FROM stream_events WHERE session_id = ? HAVING min(id) IS NOT NULL
         ON CONFLICT (session_id) DO UPDATE SET before_id = max(before_id, excluded.before_id)`,
      ),
      prune: db.prepare(
        `DELETE FROM stream_events WHERE session_id = ? AND timestamp_us < ? AND id < coalesce(
           (SELECT id FROM stream_events WHERE session_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?), '')`,
      ),
    };
  }

  archivedSessions(): string[] {
    return this.db.prepare('SELECT DISTINCT session_id FROM stream_events').pluck().all() as string[];
  }

  write(batch: readonly MetisEvent[], settled: (committed: boolean) => void): void {
    const insert = () => {
      for (const event of batch) {
        this.statements.insert.run(
          event.session_id,
          event.id,
          isoToMicros(event.timestamp),
          eventJson(event),
        );
      }
    };
    const writer = writerOf(this.db);
    if (writer === undefined) {
      insert();
      settled(true);
    } else writer.writeRow({ what: `${batch.length} streaming events`, run: insert, settled });
  }

  after(sessionId: string, afterId: string, limit: number): string[] {
    return this.statements.after.all(sessionId, afterId, limit) as string[];
  }

  horizon(sessionId: string): string | undefined {
    return this.statements.horizon.get(sessionId) as string | undefined;
  }

  prune(sessionIds: readonly string[], cutoffUs: number, keep: number): void {
    const run = () => {
      for (const sessionId of sessionIds) {
        const { changes } = this.statements.prune.run(sessionId, cutoffUs, sessionId, keep - 1);
        if (changes > 0) this.statements.raiseHorizon.run(sessionId, sessionId);
      }
    };
    const writer = writerOf(this.db);
    if (writer === undefined) run();
    else writer.writeRow({ what: 'pruning streaming events', run });
  }
}
