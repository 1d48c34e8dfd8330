import type { MetisEvent } from '../../events/envelope.js';
import type { Db } from '../database.js';
import { eventToParams } from '../event-rows.js';
import { SessionStore } from '../session-store.js';
import { COPIED_TABLES } from '../store-copy.js';
import { writePulled } from './working-copy.js';

const EVENTS = COPIED_TABLES.find((table) => table.name === 'events')!;

/**
 * What a cluster node's mirror reads and writes in its working copy while it follows other nodes'
 * sessions: how far each session is here, and another node's event put in place as pulled (never
 * shipped back).
 */
export class MirrorRows {
  private readonly lastSeqStatement;
  private readonly knownStatement;
  private readonly insertStatement;
  private readonly markPulledStatement;
  private readonly newestStatement;
  /** Parents and children of sessions, for walking a delegation tree. */
  readonly lineage: SessionStore;

  constructor(readonly db: Db) {
    this.lastSeqStatement = db.prepare('SELECT max(seq) FROM events WHERE session_id = ?').pluck();
    this.knownStatement = db.prepare('SELECT 1 FROM sessions WHERE id = ?').pluck();
    this.insertStatement = db.prepare(
      `INSERT OR IGNORE INTO events (${EVENTS.columns.join(', ')}) VALUES (${EVENTS.columns.map(() => '?').join(', ')})`,
    );
    this.markPulledStatement = db.prepare('INSERT OR IGNORE INTO pg_pulled_events (id) VALUES (?)');
    this.newestStatement = db.prepare('SELECT max(id) FROM events WHERE session_id = ?').pluck();
    this.lineage = new SessionStore(db);
  }

  get open(): boolean {
    return this.db.open;
  }

  /** The highest `seq` of the session here (0 when none). */
  lastSeq(sessionId: string): number {
    return (this.lastSeqStatement.get(sessionId) as number | null) ?? 0;
  }

  hasSession(sessionId: string): boolean {
    return this.knownStatement.get(sessionId) !== undefined;
  }

  newestEventId(sessionId: string): string | null {
    return (this.newestStatement.get(sessionId) as string | null) ?? null;
  }

  /** Puts another node's event in place, marked pulled so the shipper leaves it alone. */
  insertPulled(event: MetisEvent): void {
    writePulled(this.db, () => {
      if (this.insertStatement.run(eventToParams(event)).changes === 1)
        this.markPulledStatement.run(event.id);
    });
  }
}
