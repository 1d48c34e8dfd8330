import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import { MetisError } from '../errors.js';
import { nowMicros } from '../events/clock.js';
import { ensureIdsAfter, newId } from '../events/ids.js';
import type { FamilyLoader, LoadedSession } from '../store/family-state.js';
import { MAX_DELEGATION_DEPTH } from '../store/session-lineage.js';
import type { SessionReads, StoredSessionSummary } from '../store/session-reads.js';
import type { SessionRecord } from '../store/session-store.js';
import type { CostAccumulator } from './cost-accumulator.js';
import { emitSignal, FeedbackMemory } from './implicit-feedback.js';
import type { ConversationMessage } from './model-adapter.js';
import type { OwnerRows } from './owner-rows.js';
import type { StreamingChannel } from './streaming-channel.js';
import { TurnEvents } from './turn-events.js';
import type { DeferredPattern } from './turn-runner.js';
import type { TurnOutcome, TurnState } from './turn-state.js';

export interface SessionInfo {
  readonly id: string;
  readonly workspace_path: string;
  readonly parent_session_id: string | null;
  readonly active_model: string;
  readonly routing_policy_version: string;
  readonly turn_count: number;
  readonly cost_so_far_usd: number;
  readonly current_turn_id: string | null;
  readonly status: 'active' | 'ended';
}

export interface LiveSession {
  readonly id: string;
  readonly workspacePath: string;
  readonly workspaceHash: string;
  readonly parentSessionId: string | null;
  readonly isWorker: boolean;
  /**
   * When the session was created, in unix µs (the stored `created_at_us` after a resume), so that
   * `session.ended.duration_seconds` spans the session's life as `turn_count` and the cost do.
   */
  readonly createdAtUs: number;
  readonly sessionAllowed: Set<string>;
  stickyModel: string | null;
  activeModel: string;
  turnCount: number;
  turn: { state: TurnState; done: Promise<TurnOutcome>; timer: NodeJS.Timeout } | null;
  /**
   * Ids of this process's latest ended turns, newest last: a cancel of one is a no-op (§6.5) even
   * before its events are in the store, where older turns and those of earlier processes are found.
   */
  readonly endedTurnIds: string[];
  /** Whether a redundant cancel of this session was logged at warn already (later ones go at debug). */
  redundantCancelLogged?: boolean;
  /** A pattern recommendation deferred in the latest turn, until applied, dismissed or the next turn. */
  recommendation: (DeferredPattern & { readonly turnId: string }) | null;
  /** What the implicit feedback heuristics remember of the session (none for workers). */
  readonly feedback: FeedbackMemory | null;
  inactivityTimer: NodeJS.Timeout | null;
  ended: boolean;
}

/**
 * How many ended turn ids a live session remembers (as many as a family's load brings); older ones are
 * looked up in the store.
 */
export const REMEMBERED_ENDED_TURNS = 64;

export interface LiveSessionsOptions {
  readonly bus: EventBus;
  readonly streaming: StreamingChannel;
  /** The rows as the owner sees them: what it holds in memory, else the store's. */
  readonly sessions: OwnerRows;
  /** Any session's row, asked of the store: for the sessions this process does not hold. */
  readonly sessionReads: SessionReads;
  /** Loads a session's family for `open`. */
  readonly families: FamilyLoader;
  /** Resolves once the writes queued so far are stored (or after a bounded wait): a load sees them. */
  readonly settled: () => Promise<unknown>;
  readonly config: RuntimeConfig;
  readonly costs: CostAccumulator;
  readonly logger: Logger;
  /** RuntimeOptions.mayResume. */
  readonly mayResume: (sessionId: string) => boolean;
  /** The routing policy version a session's info names (it changes while the server runs). */
  readonly routingVersion: () => string;
  /** True once the runtime is shutting down: no idle timer starts then. */
  readonly closed: () => boolean;
}

/**
 * The sessions this process holds in memory: created here, or loaded from the store on first use
 * (`session.resumed`), each ended as `abandoned` once idle for `inactivity_timeout_ms`.
 */
export class LiveSessions {
  private readonly live = new Map<string, LiveSession>();
  /** Loads in flight, by the session asked for: two requests for one session share one load. */
  private readonly opening = new Map<string, Promise<void>>();

  constructor(private readonly options: LiveSessionsOptions) {}

  /** Creates a session and emits `session.created`; a model named here sticks, unless for a worker. */
  create(options: {
    workspacePath?: string;
    model?: string | null;
    parentSessionId?: string | null;
    sessionId?: string;
  }): LiveSession {
    const { config, sessions } = this.options;
    const model = options.model ?? null;
    const workspacePath = resolve(options.workspacePath ?? process.cwd());
    const session: LiveSession = {
      id: options.sessionId ?? newId('sess'),
      workspacePath,
      workspaceHash: sha256(workspacePath),
      parentSessionId: options.parentSessionId ?? null,
      isWorker: options.parentSessionId != null,
      createdAtUs: nowMicros(),
      sessionAllowed: new Set(),
      // A model named at creation is the user's pick: it sticks (workers take their tier's model).
      stickyModel: model !== null && options.parentSessionId == null ? model : null,
      activeModel: model ?? config.default_model,
      turnCount: 0,
      turn: null,
      endedTurnIds: [],
      recommendation: null,
      feedback: options.parentSessionId == null ? new FeedbackMemory() : null,
      inactivityTimer: null,
      ended: false,
    };
    sessions.createSession({
      id: session.id,
      parent_session_id: session.parentSessionId,
      workspace_path: workspacePath,
      workspace_hash: session.workspaceHash,
      active_model: session.activeModel,
      sticky_model: session.stickyModel,
      created_at_us: session.createdAtUs,
    });
    this.live.set(session.id, session);
    // A new id has no stored events: the bus numbers from 1 without asking the store.
    this.options.bus.seedSeq(session.id, 0);
    this.eventsOf(session.id).emit('session.created', null, {
      workspace_path: workspacePath,
      workspace_hash: session.workspaceHash,
      initial_active_model: model,
      routing_policy_version: this.options.routingVersion(),
    });
    this.touch(session);
    return session;
  }

  /** Ends a session with `session.ended`. Ending an ended session does nothing. */
  end(sessionId: string, disposition: 'completed' | 'abandoned' | 'error'): void {
    const { bus, costs } = this.options;
    const session = this.require(sessionId);
    if (session.ended) return;
    session.ended = true;
    if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
    this.options.sessions.endSession(sessionId, disposition);
    // The cost accumulator is a bus subscriber: let it see the calls emitted since the last dispatch
    // (a worker is ended right after its turn), or total_cost_usd would leave them out.
    bus.dispatchNow();
    const ended = this.eventsOf(sessionId).emit('session.ended', null, {
      disposition,
      turn_count: session.turnCount,
      total_cost_usd: costs.costOf(sessionId),
      duration_seconds: Math.max(0, nowMicros() - session.createdAtUs) / 1_000_000,
    });
    const signal = session.feedback?.onSessionEnd(disposition) ?? null;
    if (signal !== null) emitSignal(bus, sessionId, signal, ended.id);
  }

  /**
   * Loads the session's family (it and the workers below it) into memory, unless held already: its
   * next use here runs from what was loaded, with no read of the store. A session not stored is left
   * for `require` to refuse.
   */
  open(sessionId: string): Promise<void> {
    const { sessions } = this.options;
    if (this.live.has(sessionId) || sessions.holds(sessionId)) return Promise.resolve();
    let opening = this.opening.get(sessionId);
    if (opening === undefined) {
      opening = this.load(sessionId).finally(() => this.opening.delete(sessionId));
      this.opening.set(sessionId, opening);
    }
    return opening;
  }

  private async load(sessionId: string): Promise<void> {
    // Rows this process queued (a turn's last message, released since) are in the store first.
    await this.options.settled();
    // The whole tree from its root: a worker's budget and questions walk up to sessions above it.
    const family = await this.options.families.loadFamily(await this.rootOf(sessionId));
    if (family === null || this.live.has(sessionId)) return;
    this.options.sessions.hold(family);
    // What the family emits next is numbered and named after what the store holds, not read for.
    for (const loaded of family.sessions) this.options.bus.seedSeq(loaded.row.id, loaded.lastSeq);
    if (family.newestEventId !== null) ensureIdsAfter(family.newestEventId);
  }

  /** The session at the top of `sessionId`'s delegation tree, asked of the store above what is held. */
  private async rootOf(sessionId: string): Promise<string> {
    const { sessions, sessionReads } = this.options;
    let id = sessionId;
    for (let depth = 0; depth < MAX_DELEGATION_DEPTH; depth += 1) {
      const row = sessions.holds(id) ? sessions.getSession(id) : await sessionReads.session(id);
      const parent = row?.parent_session_id ?? null;
      if (parent === null) return id;
      id = parent;
    }
    return id;
  }

  /** The session, taken up from memory or the store (and announced) when this process does not run it yet. */
  require(sessionId: string): LiveSession {
    const live = this.live.get(sessionId);
    if (live) return live;
    const { sessions } = this.options;
    const loaded = sessions.loadedState(sessionId);
    // The held row, which follows this process's writes since the load, not the row as loaded.
    if (loaded !== undefined) return this.resume(sessions.getSession(sessionId) ?? loaded.row, loaded);
    const stored = sessions.getSession(sessionId);
    if (stored === null || stored.id === 'system') {
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
    }
    return this.resume(stored, null);
  }

  /** A session this process neither holds nor may take up (see RuntimeOptions.mayResume). */
  runsElsewhere(sessionId: string): boolean {
    return !this.live.has(sessionId) && !this.options.mayResume(sessionId);
  }

  has(sessionId: string): boolean {
    return this.live.has(sessionId);
  }

  /**
   * Whether a session of this id exists: one this process holds is known at once, any other is asked
   * of the store (asynchronously: a store over the network answers).
   */
  async known(sessionId: string): Promise<boolean> {
    if (this.live.has(sessionId) || this.options.sessions.holds(sessionId)) return true;
    return (await this.options.sessionReads.session(sessionId)) !== null;
  }

  all(): IterableIterator<LiveSession> {
    return this.live.values();
  }

  /** Forgets a session with no turn in flight (Runtime.release); false when a turn runs. */
  release(sessionId: string): boolean {
    const live = this.live.get(sessionId);
    if (live?.turn) return false;
    if (live?.inactivityTimer) clearTimeout(live.inactivityTimer);
    this.live.delete(sessionId);
    this.options.sessions.forget(sessionId);
    this.options.costs.forget(sessionId);
    return true;
  }

  /** The session a worker was delegated from (null: none), known here or in the store. */
  parentOf(sessionId: string): string | null {
    const live = this.live.get(sessionId);
    if (live !== undefined) return live.parentSessionId;
    return this.options.sessions.getSession(sessionId)?.parent_session_id ?? null;
  }

  /** Earlier complete messages of the session, as the model sees them. */
  history(sessionId: string): ConversationMessage[] {
    return this.options.sessions
      .messages(sessionId, { limit: 50 })
      .filter((m) => m.status === 'complete')
      .map((m) => ({ role: m.role, content: m.content as ConversationMessage['content'] }));
  }

  /** A turn of the session ended: it is remembered as ended, and the session idles from now. */
  turnEnded(session: LiveSession, turnId: string, outcome: TurnOutcome): void {
    session.turn = null;
    session.endedTurnIds.push(turnId);
    if (session.endedTurnIds.length > REMEMBERED_ENDED_TURNS) session.endedTurnIds.shift();
    if (session.feedback !== null)
      session.feedback.lastEnded = { turnId, status: outcome.status, model: outcome.model };
    this.touch(session);
  }

  /** Restarts the inactivity timer: a session idle that long ends as `abandoned`. */
  touch(session: LiveSession): void {
    if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
    if (session.ended || this.options.closed()) return;
    session.inactivityTimer = setTimeout(() => {
      if (session.turn !== null || session.ended) return;
      // A throw in a timer callback would end the process: a refused write only leaves it active.
      try {
        this.end(session.id, 'abandoned');
      } catch (error) {
        this.options.logger.error({ session_id: session.id, err: error }, 'could not end an idle session');
      }
    }, this.options.config.inactivity_timeout_ms);
    session.inactivityTimer.unref();
  }

  info(session: LiveSession): SessionInfo {
    return {
      id: session.id,
      workspace_path: session.workspacePath,
      parent_session_id: session.parentSessionId,
      active_model: session.activeModel,
      routing_policy_version: this.options.routingVersion(),
      turn_count: session.turnCount,
      cost_so_far_usd: this.options.costs.costOf(session.id),
      current_turn_id: session.turn?.state.turnId ?? null,
      status: session.ended ? 'ended' : 'active',
    };
  }

  /** A session another node runs, as the store has it (see RuntimeOptions.mayResume). */
  storedInfo(sessionId: string): SessionInfo {
    const { sessions } = this.options;
    const row = sessions.getSession(sessionId);
    return this.infoOf(
      sessionId,
      row === null
        ? null
        : { row, ...sessions.turnState(sessionId), storedCost: sessions.storedCost(sessionId) },
    );
  }

  /**
   * The session as it stands, without taking it up: one running here from memory, one held from its
   * family's load, any other as the store has it (asked asynchronously). Reading a session is no reason
   * to resume it: that would announce `session.resumed` and start its idle timer.
   */
  async describe(sessionId: string): Promise<SessionInfo> {
    const running = this.live.get(sessionId);
    if (running !== undefined) return this.info(running);
    const summary = this.heldSummary(sessionId) ?? (await this.options.sessionReads.summary(sessionId));
    // Taken up while the store answered: memory is newer than the answer.
    const meanwhile = this.live.get(sessionId);
    return meanwhile === undefined ? this.infoOf(sessionId, summary) : this.info(meanwhile);
  }

  /** A held session as its load found it (nothing wrote to it since, or it would run here). */
  private heldSummary(sessionId: string): StoredSessionSummary | undefined {
    const { sessions } = this.options;
    const loaded = sessions.loadedState(sessionId);
    if (loaded === undefined) return undefined;
    const { turnCount, currentTurnId, storedCost } = loaded;
    return { row: sessions.getSession(sessionId) ?? loaded.row, turnCount, currentTurnId, storedCost };
  }

  private infoOf(sessionId: string, summary: StoredSessionSummary | null): SessionInfo {
    if (summary === null || summary.row.id === 'system')
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
    const { row } = summary;
    return {
      id: row.id,
      workspace_path: row.workspace_path ?? process.cwd(),
      parent_session_id: row.parent_session_id,
      active_model: row.active_model ?? this.options.config.default_model,
      routing_policy_version: this.options.routingVersion(),
      turn_count: summary.turnCount,
      cost_so_far_usd: Math.round(summary.storedCost * 1e8) / 1e8,
      current_turn_id: summary.currentTurnId,
      status: row.status === 'ended' ? 'ended' : 'active',
    };
  }

  /**
   * Takes up a session written by an earlier process (or another node) and announces it with
   * `session.resumed`. Its turn count, recent turns, cost and sticky model come from the family's load
   * (`loaded`), else from the store's rows, so routing, a cancel and `session.ended` carry on where the
   * earlier process left off.
   */
  private resume(stored: SessionRecord, loaded: LoadedSession | null): LiveSession {
    const { config, costs } = this.options;
    const state = loaded ?? this.readState(stored.id);
    const workspacePath = stored.workspace_path ?? process.cwd();
    const session: LiveSession = {
      id: stored.id,
      workspacePath,
      workspaceHash: stored.workspace_hash ?? sha256(workspacePath),
      parentSessionId: stored.parent_session_id,
      isWorker: stored.parent_session_id !== null,
      createdAtUs: stored.created_at_us,
      sessionAllowed: new Set(),
      stickyModel: stored.parent_session_id === null ? stored.sticky_model : null,
      activeModel: stored.active_model ?? config.default_model,
      turnCount: state.turnCount,
      turn: null,
      endedTurnIds: state.recentTurns.map((turn) => turn.turnId).slice(-REMEMBERED_ENDED_TURNS),
      recommendation: null,
      feedback: stored.parent_session_id === null ? new FeedbackMemory() : null,
      inactivityTimer: null,
      ended: stored.status === 'ended',
    };
    this.live.set(session.id, session);
    costs.seed(session.id, state.storedCost, state.lastEventId);
    if (!session.ended) {
      this.eventsOf(session.id).emit('session.resumed', null, {
        workspace_hash: session.workspaceHash,
        last_event_id_at_resume: state.lastEventId,
      });
      this.touch(session);
    }
    return session;
  }

  /** What `resume` needs of a session no family load brought, read from the store's rows. */
  private readState(
    sessionId: string,
  ): Pick<LoadedSession, 'turnCount' | 'storedCost' | 'lastEventId' | 'recentTurns'> {
    const { sessions } = this.options;
    return {
      turnCount: sessions.turnCount(sessionId),
      storedCost: sessions.storedCost(sessionId),
      lastEventId: sessions.lastEventId(sessionId),
      // Earlier turns are found in the store when a cancel names one.
      recentTurns: [],
    };
  }

  /** Session-level events: outside any turn. */
  private eventsOf(sessionId: string): TurnEvents {
    return new TurnEvents(this.options.bus, this.options.streaming, sessionId, null, false);
  }
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
