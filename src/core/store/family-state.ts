import type { Spent, StoredCaps } from './budget-rows.js';
import type { StoredQueue } from './queue-rows.js';
import type { MessageRecord, SessionRecord, ToolCallRecord } from './session-store.js';

/**
 * The most messages of a session any reader takes from its newest: the model's history (50), a stream
 * snapshot (50), an AG-UI thread (200), recovery's look for a turn's messages (200). The owner keeps
 * this many in memory, so every one of them can be answered from there.
 */
export const RECENT_MESSAGES = 200;

/**
 * The turns of a session whose start and end the owner keeps: explicit feedback and a cancel ask
 * whether a turn exists and where it ended (the live session remembers 16 ended turns today).
 */
export const RECENT_TURNS = 64;

/** A turn as its events placed it. */
export interface LoadedTurn {
  readonly turnId: string;
  /** The id of its `turn.started`. */
  readonly startedId: string;
  /** The id of its first `turn.completed` or `turn.cancelled`; null while it runs (or was cut). */
  readonly endedId: string | null;
}

/**
 * One session of a family as its owner needs it in memory to run it without reading the store again
 * (docs/plans/store-port.md §2, the "owner" column).
 */
export interface LoadedSession {
  /** The row (group A): `require`, `resume`, `parentOf`, `storedInfo`, `hasSession`, `isWorker`. */
  readonly row: SessionRecord;
  /** Turns run in any process, one per `turn.started` (group B): `resume`, snapshot, `session.ended`. */
  readonly turnCount: number;
  /** The turn started and not ended as the events say, else null: `storedInfo`, take-over's `adoptable`. */
  readonly currentTurnId: string | null;
  /** The newest RECENT_TURNS turns, oldest first: `cancelTurn`'s `hasTurn`, explicit feedback, rejoin. */
  readonly recentTurns: readonly LoadedTurn[];
  /** The session's newest stored event (null: none): `costs.seed`, `session.resumed`'s last id. */
  readonly lastEventId: string | null;
  /** The highest `seq` stored (0: none): the bus numbers the session's next event after it (event-bus.ts). */
  readonly lastSeq: number;
  /**
   * What its stored events cost (COST_EVENT_TYPES, summed as SQLite's `sum()` does, so both stores give
   * the same double): `costs.seed` at resume, `storedInfo` (group H).
   */
  readonly storedCost: number;
  /**
   * Its newest RECENT_MESSAGES stored messages of every status, oldest first (group C). Readers filter
   * as they do today: `history` and the AG-UI thread keep `complete` ones, a snapshot shows all.
   */
  readonly recentMessages: readonly MessageRecord[];
  /** Tool-call rows still pending or running, in row order (group D): the resume plan, chat-route output. */
  readonly openToolCalls: readonly ToolCallRecord[];
  /** Its workers (one level), by id: lineage, `selfAndDescendants`, the stream hub's `workersOf`. */
  readonly childIds: readonly string[];
  /** The model its newest `route.decided`/`route.overridden` chose, null before any: AG-UI state. */
  readonly lastRoutedModel: string | null;
  /** Caps a request set, null when none did (group H): Budgets' `capsOf`. */
  readonly budgetCaps: StoredCaps | null;
  /** Its own spend as counted so far: Budgets' `spentBy` (and summed over the family, `spentByTree`). */
  readonly spent: Spent;
  /** Turns and steers waiting, null when nothing is (queue-rows.ts): the turn queue after a take-over. */
  readonly queue: StoredQueue | null;
}

/** What an owner loads once per ownership of a family: a root session and its workers, theirs too. */
export interface FamilyState {
  readonly rootSessionId: string;
  /** The root first, then its descendants by depth, each level by id. */
  readonly sessions: readonly LoadedSession[];
  /** The newest event id of any of them: the id generator is moved past it (`ensureIdsAfter`). */
  readonly newestEventId: string | null;
}

/**
 * Loads a family from the store in one go, for the node that takes it up (store-port.md step 4).
 * `rootSessionId` is the root of the lease; a worker's id loads its own subtree.
 */
export interface FamilyLoader {
  /** null when no such session is stored, and for the `system` sentinel, which is no family. */
  loadFamily(rootSessionId: string): Promise<FamilyState | null>;
}

/** The SessionRecord fields of a `sessions` row (which has budget and queue columns too). */
export function toSessionRecord(row: SessionRecord): SessionRecord {
  return {
    id: row.id,
    parent_session_id: row.parent_session_id,
    workspace_path: row.workspace_path,
    workspace_hash: row.workspace_hash,
    active_model: row.active_model,
    sticky_model: row.sticky_model,
    status: row.status,
    disposition: row.disposition,
    created_at_us: row.created_at_us,
    updated_at_us: row.updated_at_us,
  };
}

/** The newest of the family's sessions' newest event ids. */
export function newestOf(sessions: readonly LoadedSession[]): string | null {
  let newest: string | null = null;
  for (const session of sessions)
    if (session.lastEventId !== null && (newest === null || session.lastEventId > newest))
      newest = session.lastEventId;
  return newest;
}

/** The family's session of this id, if loaded. */
export function loadedSession(state: FamilyState, sessionId: string): LoadedSession | undefined {
  return state.sessions.find((session) => session.row.id === sessionId);
}
