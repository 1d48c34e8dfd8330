import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { SqliteBudgetRows } from './budget-rows.js';
import type { Db } from './database.js';
import {
  type FamilyLoader,
  type FamilyState,
  type LoadedSession,
  type LoadedTurn,
  newestOf,
  RECENT_MESSAGES,
  RECENT_TURNS,
  toSessionRecord,
} from './family-state.js';
import { SqliteQueueRows } from './queue-rows.js';
import { type SessionRecord, SessionStore, type ToolCallRow, toToolCallRecord } from './session-store.js';
import { SqliteTraceLookups } from './trace-lookups.js';

/**
 * A family read from a SQLite store, all in one synchronous call (so from one state of the file: no
 * write of this connection can come between), answered as a resolved promise. Reuses the reads
 * SessionStore, BudgetRows, QueueRows and TraceLookups already make; SQL only where none exists.
 */
export class SqliteFamilyLoader implements FamilyLoader {
  private readonly sessions: SessionStore;
  private readonly budgets: SqliteBudgetRows;
  private readonly queues: SqliteQueueRows;
  private readonly lookups: SqliteTraceLookups;

  constructor(private readonly db: Db) {
    this.sessions = new SessionStore(db);
    this.budgets = new SqliteBudgetRows(db);
    this.queues = new SqliteQueueRows(db);
    this.lookups = new SqliteTraceLookups(db);
  }

  async loadFamily(rootSessionId: string): Promise<FamilyState | null> {
    return this.load(rootSessionId);
  }

  private load(rootSessionId: string): FamilyState | null {
    if (rootSessionId === SYSTEM_SESSION_ID) return null;
    const root = this.sessions.getSession(rootSessionId);
    if (root === null) return null;
    const sessions: LoadedSession[] = [];
    let level: SessionRecord[] = [root];
    while (level.length > 0) {
      const next: SessionRecord[] = [];
      for (const row of level) {
        const loaded = this.session(row);
        sessions.push(loaded);
        for (const childId of loaded.childIds) next.push(this.sessions.getSession(childId)!);
      }
      level = next.sort((a, b) => (a.id < b.id ? -1 : 1));
    }
    return { rootSessionId, sessions, newestEventId: newestOf(sessions) };
  }

  private session(row: SessionRecord): LoadedSession {
    const id = row.id;
    const { turnCount, currentTurnId } = this.sessions.turnState(id);
    return {
      row: toSessionRecord(row),
      turnCount,
      currentTurnId,
      recentTurns: this.recentTurns(id),
      lastEventId: this.sessions.lastEventId(id),
      lastSeq: this.db
        .prepare('SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ?')
        .pluck()
        .get(id) as number,
      storedCost: this.sessions.storedCost(id),
      recentMessages: this.sessions.messages(id, { limit: RECENT_MESSAGES }),
      openToolCalls: (
        this.db
          .prepare(
            "SELECT * FROM tool_calls WHERE session_id = ? AND status IN ('pending', 'running') ORDER BY row_id",
          )
          .all(id) as ToolCallRow[]
      ).map(toToolCallRecord),
      childIds: this.sessions.childSessionIds(id).sort(),
      lastRoutedModel: this.lookups.routedModelNow(id),
      budgetCaps: this.budgets.capsOf(id),
      spent: this.budgets.spentBy(id),
      queue: this.queues.queueOf(id),
    };
  }

  /** The newest RECENT_TURNS turns with where each started and first ended, oldest first. */
  private recentTurns(sessionId: string): LoadedTurn[] {
    const rows = this.db
      .prepare(
        `SELECT s.turn_id AS turnId, s.id AS startedId,
                (SELECT min(e.id) FROM events e WHERE e.session_id = s.session_id AND e.turn_id = s.turn_id
                    AND e.type IN ('turn.completed', 'turn.cancelled')) AS endedId
           FROM events s WHERE s.session_id = ? AND s.type = 'turn.started' AND s.turn_id IS NOT NULL
          ORDER BY s.id DESC LIMIT ?`,
      )
      .all(sessionId, RECENT_TURNS) as LoadedTurn[];
    return rows.reverse();
  }
}
