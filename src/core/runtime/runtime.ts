import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { type RuntimeConfig, type RuntimeConfigInput, runtimeConfig } from '../config/runtime-schema.js';
import { MetisError } from '../errors.js';
import { nowMicros } from '../events/clock.js';
import { newId } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import type { Db } from '../store/database.js';
import { SessionStore } from '../store/session-store.js';
import { DEFAULT_COMMIT_WAIT_MS, writerOf } from '../store/trace-writer.js';
import type { ChildProcessRecord } from './child-process-record.js';
import { ConfirmationBroker, type ConfirmationRequest } from './confirmations.js';
import { CostAccumulator } from './cost-accumulator.js';
import { Delegations } from './delegations.js';
import { Evaluator } from './evaluator/evaluator.js';
import type { Judge } from './evaluator/judge.js';
import { LlmJudge } from './evaluator/llm-judge.js';
import { emitSignal, FeedbackMemory } from './implicit-feedback.js';
import type { ConversationMessage } from './model-adapter.js';
import { ModelRegistry } from './models/model-registry.js';
import { fingerprintOf } from './patterns/fingerprint.js';
import { PatternRecorder } from './patterns/pattern-recorder.js';
import { PatternStore } from './patterns/pattern-store.js';
import { ProviderHealth } from './provider-health.js';
import { RoutingPolicy } from './routing-policy.js';
import { isSelfOrAncestor, selfAndDescendants } from './session-lineage.js';
import { StreamingChannel } from './streaming-channel.js';
import { ToolDispatcher } from './tool-dispatcher.js';
import { builtinTools } from './tools/builtin.js';
import { createDelegateTool } from './tools/delegate.js';
import { SecretPaths } from './tools/secret-paths.js';
import type { Tool } from './tools/tool.js';
import { TurnEvents } from './turn-events.js';
import {
  type CancelReason,
  cancelTurnState,
  type DeferredPattern,
  redirectTurn,
  type TurnOutcome,
  TurnRunner,
  type TurnState,
} from './turn-runner.js';

export interface RuntimeOptions {
  readonly bus: EventBus;
  readonly db: Db;
  readonly config?: RuntimeConfigInput;
  readonly logger?: Logger;
  readonly streaming?: StreamingChannel;
  /** Extra tools (tests, plugins) next to the built-ins. */
  readonly tools?: readonly Tool[];
  /** Test and conformance hook: awaited after `tool.called`, before a tool starts executing. */
  readonly beforeToolExecute?: () => Promise<void>;
  /**
   * Whether this process may take up a stored session it does not hold in memory (a cluster node: only
   * one whose lease it holds). A read of another is answered from the store, never by resuming it, which
   * would emit `session.resumed` into a session another node numbers. Default: always.
   */
  readonly mayResume?: (sessionId: string) => boolean;
  /** Where the shell tool records its running process groups (`metis serve`: next to the database). */
  readonly childProcesses?: ChildProcessRecord;
  /**
   * This server's own secrets, wherever they are: file tools always ask before reading them
   * (`metis serve`: the config file it loaded and its database, with the files named after it).
   */
  readonly protectedPaths?: readonly string[];
  /** The evaluator's judge (default: the heuristic one; an LLM judge implements the same interface). */
  readonly judge?: Judge;
}

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

interface LiveSession {
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
  /** A pattern recommendation deferred in the latest turn, until applied, dismissed or the next turn. */
  recommendation: (DeferredPattern & { readonly turnId: string }) | null;
  /** What the implicit feedback heuristics remember of the session (none for workers). */
  readonly feedback: FeedbackMemory | null;
  inactivityTimer: NodeJS.Timeout | null;
  ended: boolean;
}

const MODEL_ID = /^[a-z0-9-]+:\S+$/;

/** How many ended turn ids a live session remembers; older ones are looked up in the store. */
const REMEMBERED_ENDED_TURNS = 16;

/** What a cancel did: started cancelling, or nothing, the turn being already cancelling or ended. */
export type CancelOutcome = 'cancelling' | 'already_cancelling' | 'already_ended';

/**
 * The agent runtime: sessions, turns, routing, model calls, tools, cancellation and delegation. It
 * emits catalog events on the bus and streaming-only events on `streaming`; the server wires both to
 * clients and HTTP to the methods here.
 */
export class Runtime {
  readonly config: RuntimeConfig;
  readonly streaming: StreamingChannel;
  readonly sessions: SessionStore;
  readonly models: ModelRegistry;
  readonly confirmations = new ConfirmationBroker();
  readonly costs = new CostAccumulator();
  readonly health: ProviderHealth;
  /** Scores turns and sessions (null when `runtime.evaluator.enabled` is off). */
  readonly evaluator: Evaluator | null;
  /** What similar turns did on each model (null when `runtime.patterns.enabled` is off). */
  readonly patterns: PatternStore | null;
  private readonly patternRecorder: PatternRecorder | null;
  private readonly bus: EventBus;
  private readonly logger: Logger;
  private readonly runner: TurnRunner;
  private readonly live = new Map<string, LiveSession>();
  /** The routing rules in effect and their version (runtime.routing_policy_file, re-read on change). */
  readonly routing: RoutingPolicy;
  private readonly beforeToolExecute?: () => Promise<void>;
  private readonly mayResume: (sessionId: string) => boolean;
  /** A user's turn waits for its `turn.started` to be stored before it calls a model (see TurnRequest). */
  private readonly startGate?: (turnStartedId: string) => Promise<void>;
  private closed = false;

  constructor(options: RuntimeOptions) {
    this.bus = options.bus;
    this.config = runtimeConfig(options.config);
    this.logger = options.logger ?? silentLogger();
    this.streaming = options.streaming ?? new StreamingChannel();
    this.sessions = new SessionStore(options.db);
    this.models = new ModelRegistry(this.config);
    this.health = new ProviderHealth(this.config.provider_health);
    this.models.health = this.health;
    this.beforeToolExecute = options.beforeToolExecute;
    this.mayResume = options.mayResume ?? (() => true);
    const writer = writerOf(options.db);
    if (writer !== undefined) {
      this.startGate = (id) => writer.whenCommitted(id, DEFAULT_COMMIT_WAIT_MS);
    }
    this.routing = new RoutingPolicy(this.config, this.bus, {
      logger: this.logger,
      modelProblem: (model) => {
        const resolution = this.models.resolve(model);
        if (resolution.ok) return null;
        if (resolution.failure === 'not_configured')
          return `cannot serve: ${resolution.detail ?? 'its provider is not configured'}`;
        if (resolution.failure === 'provider_unavailable')
          return `names a provider out of routing: ${resolution.detail ?? 'unavailable'}`;
        return null;
      },
    });
    const delegations: Delegations = new Delegations(this.bus, this.streaming, this.config, this.models, {
      startWorker: (parent, model, sessionId) =>
        this.createSession({
          workspacePath: parent.workspacePath,
          model,
          parentSessionId: parent.id,
          sessionId,
        }),
      runWorkerTurn: (sessionId, task, model, state, excludedTools) =>
        this.runTurn(this.require(sessionId), task, null, model, state, excludedTools),
      toolNames: (): string[] => dispatcher.available().map((tool: Tool) => tool.name),
      endWorker: (sessionId, disposition) => this.endSession(sessionId, disposition),
      session: (id) => this.require(id),
    });
    const tools = [
      ...builtinTools({
        shell: { timeoutMs: this.config.shell_timeout_ms, children: options.childProcesses },
        readFile: {
          outsideWorkspace: this.config.outside_workspace,
          secrets: new SecretPaths({
            patterns: this.config.secret_paths,
            protectedPaths: options.protectedPaths,
          }),
        },
      }),
      createDelegateTool((input, context) => delegations.run(input, context)),
      ...(options.tools ?? []),
    ];
    const dispatcher = new ToolDispatcher(tools, this.config, this.sessions, this.confirmations, this.logger);
    this.runner = new TurnRunner(
      this.config,
      this.models,
      dispatcher,
      this.sessions,
      this.logger,
      () => this.routing.rules,
    );
    this.costs.attach(this.bus);
    this.health.attach(this.bus);
    this.patterns = this.config.patterns.enabled ? new PatternStore(options.db, this.config.patterns) : null;
    this.patternRecorder =
      this.patterns === null
        ? null
        : new PatternRecorder(this.patterns, this.bus, options.db, this.config.pricing_version);
    const recorder = this.patternRecorder;
    this.evaluator = this.config.evaluator.enabled
      ? new Evaluator({
          bus: this.bus,
          db: options.db,
          logger: this.logger,
          judge:
            options.judge ??
            (this.config.evaluator.judge_model === null
              ? undefined
              : new LlmJudge(this.config.evaluator.judge_model, this.models, this.config)),
          onSessionScored: recorder === null ? undefined : (scored) => recorder.record(scored),
        })
      : null;
    this.evaluator?.attach();
  }

  /** Creates a session and emits `session.created`. */
  createSession(
    options: {
      workspacePath?: string;
      model?: string | null;
      parentSessionId?: string | null;
      sessionId?: string;
    } = {},
  ): SessionInfo {
    this.assertOpen();
    const model = options.model ?? null;
    if (model !== null) assertConfiguredModel(this.models, model, 'model');
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
      activeModel: model ?? this.config.default_model,
      turnCount: 0,
      turn: null,
      endedTurnIds: [],
      recommendation: null,
      feedback: options.parentSessionId == null ? new FeedbackMemory() : null,
      inactivityTimer: null,
      ended: false,
    };
    this.sessions.createSession({
      id: session.id,
      parent_session_id: session.parentSessionId,
      workspace_path: workspacePath,
      workspace_hash: session.workspaceHash,
      active_model: session.activeModel,
      sticky_model: session.stickyModel,
    });
    this.live.set(session.id, session);
    new TurnEvents(this.bus, this.streaming, session.id, null, false).emit('session.created', null, {
      workspace_path: workspacePath,
      workspace_hash: session.workspaceHash,
      initial_active_model: model,
      routing_policy_version: this.routing.version,
    });
    this.touch(session);
    return this.info(session);
  }

  /**
   * Submits a user message. Resolves at once with the turn id; `done` settles when the turn ends.
   * @throws MetisError when the session is unknown or ended, or a turn is already in flight.
   */
  submitTurn(sessionId: string, message: string, options: { model?: string | null } = {}) {
    this.assertOpen();
    const session = this.require(sessionId);
    if (session.ended) throw new MetisError('METIS_ERR_SESSION_ENDED', `session ${sessionId} has ended`);
    if (session.turn !== null) {
      throw new MetisError(
        'METIS_ERR_TURN_IN_FLIGHT',
        `session ${sessionId} already has turn ${session.turn.state.turnId} in flight`,
      );
    }
    if (options.model) assertModelId(options.model, 'model');
    const state: TurnState = { turnId: newId('turn'), controller: new AbortController(), cancelReason: null };
    // A retry or a "no, actually…" judges the turn before; said once this turn has started.
    const signal = session.feedback?.onMessage(state.turnId, message) ?? null;
    const gate = this.startGate;
    const startGate =
      signal === null
        ? gate
        : async (turnStartedId: string) => {
            emitSignal(this.bus, session.id, signal, turnStartedId);
            await gate?.(turnStartedId);
          };
    const done = this.runTurn(session, message, options.model ?? null, null, state, undefined, startGate);
    return { turnId: state.turnId, done };
  }

  /**
   * Cancels the turn in flight (streaming §6). Cancel is idempotent (§6.5, docs/decisions.md
   * "Redundant cancel"): a turn of this session that is already cancelling or has ended, in this process
   * or an earlier one, is left alone and logged as `bus.handler_warning`, with no event.
   * @throws MetisError METIS_ERR_TURN_NOT_FOUND when the session never had that turn.
   */
  cancelTurn(sessionId: string, turnId: string, reason: CancelReason = 'user_cancel'): CancelOutcome {
    const session = this.require(sessionId);
    const turn = session.turn;
    if (turn !== null && turn.state.turnId === turnId && turn.state.cancelReason === null) {
      cancelTurnState(turn.state, reason);
      return 'cancelling';
    }
    let outcome: CancelOutcome;
    if (turn !== null && turn.state.turnId === turnId) outcome = 'already_cancelling';
    else if (session.endedTurnIds.includes(turnId) || this.sessions.hasTurn(sessionId, turnId))
      outcome = 'already_ended';
    else throw new MetisError('METIS_ERR_TURN_NOT_FOUND', `session ${sessionId} has no turn ${turnId}`);
    // Streaming §6.5: a no-op with no canonical event; the server logs bus.handler_warning.
    this.logger.warn(
      {
        diagnostic: 'bus.handler_warning',
        session_id: sessionId,
        turn_id: turnId,
        reason,
        cancelling_reason: turn?.state.turnId === turnId ? turn.state.cancelReason : null,
        outcome,
      },
      outcome === 'already_cancelling'
        ? 'redundant cancel ignored: the turn is already cancelling'
        : 'redundant cancel ignored: the turn has already ended',
    );
    return outcome;
  }

  /**
   * Answers a pending tool confirmation (HTTP `POST /sessions/{id}/confirmations/{rid}`): one of the
   * session's own, or of a worker that descends from it. With `inputHash`, only when it is the hash of
   * the pending input (else METIS_ERR_CONFIRMATION_MISMATCH, and nothing is decided).
   */
  confirm(
    sessionId: string,
    requestId: string,
    decision: 'allow' | 'deny',
    scope: 'once' | 'session' = 'once',
    client: string | null = null,
    inputHash?: string,
  ): void {
    this.require(sessionId);
    this.confirmations.answer(sessionId, requestId, decision, scope, client, {
      mayAnswer: (owner) => isSelfOrAncestor(this.sessions, sessionId, owner),
      inputHash,
    });
  }

  /** Confirmations waiting in a session and in the workers that descend from it, with their full input. */
  pendingConfirmations(sessionId: string): ConfirmationRequest[] {
    if (!this.live.has(sessionId) && !this.mayResume(sessionId)) {
      this.storedInfo(sessionId);
      return this.sessions.unansweredConfirmations(selfAndDescendants(this.sessions, sessionId));
    }
    this.require(sessionId);
    return this.confirmations.list(selfAndDescendants(this.sessions, sessionId));
  }

  /** Sets the session's sticky model (the `manual_sticky` routing policy). */
  setStickyModel(sessionId: string, model: string): SessionInfo {
    assertConfiguredModel(this.models, model, 'model');
    const session = this.require(sessionId);
    const swap =
      session.turn === null ? (session.feedback?.onModelSwap(session.activeModel, model) ?? null) : null;
    if (swap !== null) emitSignal(this.bus, session.id, swap, null);
    session.stickyModel = model;
    session.activeModel = model;
    this.sessions.setStickyModel(sessionId, model);
    return this.info(session);
  }

  /** Ends a session with `session.ended`. Ending an ended session does nothing. */
  endSession(sessionId: string, disposition: 'completed' | 'abandoned' | 'error' = 'completed'): void {
    const session = this.require(sessionId);
    if (session.ended) return;
    session.ended = true;
    if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
    this.sessions.endSession(sessionId, disposition);
    // The cost accumulator is a bus subscriber: let it see the calls emitted since the last dispatch
    // (a worker is ended right after its turn), or total_cost_usd would leave them out.
    this.bus.dispatchNow();
    const ended = new TurnEvents(this.bus, this.streaming, sessionId, null, false).emit(
      'session.ended',
      null,
      {
        disposition,
        turn_count: session.turnCount,
        total_cost_usd: this.costs.costOf(sessionId),
        duration_seconds: Math.max(0, nowMicros() - session.createdAtUs) / 1_000_000,
      },
    );
    const signal = session.feedback?.onSessionEnd(disposition) ?? null;
    if (signal !== null) emitSignal(this.bus, sessionId, signal, ended.id);
  }

  getSession(sessionId: string): SessionInfo {
    if (!this.live.has(sessionId) && !this.mayResume(sessionId)) return this.storedInfo(sessionId);
    return this.info(this.require(sessionId));
  }

  /** A session another node runs, as the store has it (see RuntimeOptions.mayResume). */
  private storedInfo(sessionId: string): SessionInfo {
    const stored = this.sessions.getSession(sessionId);
    if (stored === null || stored.id === 'system')
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
    const now = this.sessions.turnState(sessionId);
    return {
      id: stored.id,
      workspace_path: stored.workspace_path ?? process.cwd(),
      parent_session_id: stored.parent_session_id,
      active_model: stored.active_model ?? this.config.default_model,
      routing_policy_version: this.routing.version,
      turn_count: now.turnCount,
      cost_so_far_usd: Math.round(this.sessions.storedCost(sessionId) * 1e8) / 1e8,
      current_turn_id: now.currentTurnId,
      status: stored.status === 'ended' ? 'ended' : 'active',
    };
  }

  hasSession(sessionId: string): boolean {
    return this.live.has(sessionId) || this.sessions.getSession(sessionId) !== null;
  }

  /**
   * Drops what this process holds in memory of a session with no turn in flight, so that its next use
   * loads it from the store again (`session.resumed`): another process wrote it since. False when a turn
   * runs, and nothing is dropped.
   */
  release(sessionId: string): boolean {
    const live = this.live.get(sessionId);
    if (live?.turn) return false;
    if (live?.inactivityTimer) clearTimeout(live.inactivityTimer);
    this.live.delete(sessionId);
    this.costs.forget(sessionId);
    return true;
  }

  /** The turn in flight, if any: the runtime's `done` promise for tests and shutdown. */
  currentTurn(sessionId: string): { turnId: string; done: Promise<TurnOutcome> } | null {
    if (!this.live.has(sessionId) && !this.mayResume(sessionId)) return null;
    const turn = this.require(sessionId).turn;
    return turn ? { turnId: turn.state.turnId, done: turn.done } : null;
  }

  /** Cancels every turn in flight and waits for them to end. Safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const pending: Promise<unknown>[] = [];
    for (const session of this.live.values()) {
      if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
      if (session.turn && !session.isWorker) {
        cancelTurnState(session.turn.state, 'client_disconnect');
        pending.push(session.turn.done.catch(() => undefined));
      }
    }
    await Promise.all(pending);
    await this.evaluator?.close();
    this.costs.detach(this.bus);
    this.routing.close();
    this.health.detach(this.bus);
  }

  /**
   * Runs one turn; the promise never rejects. The runner ends a failing turn as a failed turn itself;
   * the catch below is the last line, so that even a bug there cannot leave a rejection no one handles
   * (Node would exit) or a session stuck with a turn in flight.
   */
  private runTurn(
    session: LiveSession,
    message: string,
    overrideModel: string | null,
    delegateModel: string | null,
    state: TurnState,
    excludedTools?: ReadonlySet<string>,
    startGate?: (turnStartedId: string) => Promise<void>,
  ): Promise<TurnOutcome> {
    const timer = setTimeout(() => cancelTurnState(state, 'timeout'), this.config.turn_timeout_ms);
    session.recommendation = null;
    const entry = { state, timer, done: undefined as unknown as Promise<TurnOutcome> };
    session.turn = entry;
    session.turnCount += 1;
    const events = new TurnEvents(this.bus, this.streaming, session.id, state.turnId, session.isWorker);
    entry.done = this.runner
      .run({
        events,
        state,
        messageText: message,
        overrideModel,
        stickyModel: session.stickyModel,
        delegateModel,
        workspacePath: session.workspacePath,
        isWorker: session.isWorker,
        excludedTools,
        history: () => this.history(session.id),
        sessionAllowed: session.sessionAllowed,
        beforeToolExecute: this.beforeToolExecute,
        startGate,
        advise: this.adviserFor(session)?.(message),
        onDeferredPattern: (deferred) => {
          session.recommendation = { ...deferred, turnId: state.turnId };
        },
      })
      .catch((error: unknown): TurnOutcome => {
        this.logger.error(
          { session_id: session.id, turn_id: state.turnId, err: error },
          'turn failed outside the agent loop',
        );
        return {
          status: 'failed',
          model: '',
          finalText: '',
          llmCalls: 0,
          toolCalls: 0,
          costUsd: 0,
          wallTimeSeconds: 0,
        };
      })
      .then((outcome) => {
        clearTimeout(timer);
        session.turn = null;
        session.endedTurnIds.push(state.turnId);
        if (session.endedTurnIds.length > REMEMBERED_ENDED_TURNS) session.endedTurnIds.shift();
        if (session.feedback !== null)
          session.feedback.lastEnded = { turnId: state.turnId, status: outcome.status, model: outcome.model };
        this.touch(session);
        return outcome;
      });
    return entry.done;
  }

  /**
   * Applies the pattern recommendation deferred in the running turn (bus §6.5b): the call in flight is
   * cut, then the turn emits `route.overridden`, parented to its `route.decided` (which stays as it was),
   * and goes on with the recommended model.
   * @throws MetisError METIS_ERR_NO_RECOMMENDATION when none is pending, or its turn is ending.
   */
  overrideRoute(sessionId: string): {
    turn_id: string;
    original_chosen_model: string;
    new_chosen_model: string;
  } {
    const session = this.require(sessionId);
    const pending = this.pendingRecommendation(session);
    const turn = session.turn;
    if (turn === null || turn.state.turnId !== pending.turnId || turn.state.ending || turn.state.cancelReason)
      throw new MetisError(
        'METIS_ERR_NO_RECOMMENDATION',
        `turn ${pending.turnId} of session ${sessionId} has ended: an override re-dispatches a running turn; dismiss the recommendation instead, or send the message again with --model ${pending.model}`,
      );
    const resolution = this.models.resolve(pending.model);
    if (!resolution.ok)
      throw new MetisError(
        'METIS_ERR_NO_RECOMMENDATION',
        `the recommended model ${pending.model} cannot serve now (${resolution.failure}${resolution.detail ? `: ${resolution.detail}` : ''})`,
      );
    // route.overridden comes from the turn, once the call in flight is closed (TurnRunner).
    redirectTurn(turn.state, {
      model: pending.model,
      adapter: resolution.adapter,
      routeDecidedId: pending.routeDecidedId,
      payload: {
        original_chosen_model: pending.chosenModel,
        new_chosen_model: pending.model,
        deferred_policy: 'pattern',
        rule_name: pending.ruleName,
        pattern_confidence: pending.confidence,
      },
    });
    session.recommendation = null;
    return {
      turn_id: pending.turnId,
      original_chosen_model: pending.chosenModel,
      new_chosen_model: pending.model,
    };
  }

  /**
   * Dismisses the pending pattern recommendation (`pattern.override_dismissed`): the turn keeps its
   * model. Possible until the session's next turn starts.
   * @throws MetisError METIS_ERR_NO_RECOMMENDATION when none is pending.
   */
  dismissRecommendation(sessionId: string): {
    turn_id: string;
    chosen_model: string;
    dismissed_pattern_model: string;
  } {
    const session = this.require(sessionId);
    const pending = this.pendingRecommendation(session);
    const running = session.turn?.state.turnId === pending.turnId && session.turn.state.ending !== true;
    this.bus.emit({
      type: 'pattern.override_dismissed',
      session_id: sessionId,
      // Outside the turn once it has ended: nothing may follow its terminal event in it.
      turn_id: running ? pending.turnId : null,
      parent_event_id: pending.routeDecidedId,
      actor: 'user',
      payload: {
        chosen_model: pending.chosenModel,
        dismissed_pattern_model: pending.model,
        rule_name: pending.ruleName,
        pattern_confidence: pending.confidence,
      },
    });
    session.recommendation = null;
    return {
      turn_id: pending.turnId,
      chosen_model: pending.chosenModel,
      dismissed_pattern_model: pending.model,
    };
  }

  /** Clears the pattern store (`pattern.evicted` manual_clear in the system session). */
  clearPatterns(): { entries_evicted: number } {
    if (this.patterns === null || this.patternRecorder === null)
      throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'pattern routing is off (runtime.patterns.enabled)');
    const eviction = this.patterns.clear();
    this.patternRecorder.evicted('system', eviction, null);
    return { entries_evicted: eviction.entries_evicted };
  }

  private pendingRecommendation(session: LiveSession): NonNullable<LiveSession['recommendation']> {
    if (session.recommendation === null)
      throw new MetisError(
        'METIS_ERR_NO_RECOMMENDATION',
        `session ${session.id} has no pattern recommendation pending: its latest route.decided deferred none, or it was applied or dismissed`,
      );
    return session.recommendation;
  }

  /** The pattern store's advice for a turn of this session (workers are routed by their tier). */
  private adviserFor(session: LiveSession) {
    const patterns = this.patterns;
    if (patterns === null || session.isWorker) return undefined;
    return (message: string) => (otherwise: string, toolsInHistory: boolean) =>
      patterns.advise(fingerprintOf(message, toolsInHistory, session.workspaceHash).key, otherwise);
  }

  /** Earlier complete messages of the session, as the model sees them. */
  private history(sessionId: string): ConversationMessage[] {
    return this.sessions
      .messages(sessionId, { limit: 50 })
      .filter((m) => m.status === 'complete')
      .map((m) => ({ role: m.role, content: m.content as ConversationMessage['content'] }));
  }

  /** Restarts the inactivity timer: a session idle that long ends as `abandoned`. */
  private touch(session: LiveSession): void {
    if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
    if (session.ended || this.closed) return;
    session.inactivityTimer = setTimeout(() => {
      if (session.turn !== null || session.ended) return;
      // A throw in a timer callback would end the process: a refused write only leaves it active.
      try {
        this.endSession(session.id, 'abandoned');
      } catch (error) {
        this.logger.error({ session_id: session.id, err: error }, 'could not end an idle session');
      }
    }, this.config.inactivity_timeout_ms);
    session.inactivityTimer.unref();
  }

  private require(sessionId: string): LiveSession {
    const live = this.live.get(sessionId);
    if (live) return live;
    const stored = this.sessions.getSession(sessionId);
    if (stored === null || stored.id === 'system') {
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
    }
    return this.resume(stored);
  }

  /**
   * Loads a session written by an earlier process and announces it with `session.resumed`. Its turn
   * count and sticky model come back from the database, so routing and `session.ended.turn_count`
   * carry on where the earlier process left off.
   */
  private resume(stored: NonNullable<ReturnType<SessionStore['getSession']>>): LiveSession {
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
      activeModel: stored.active_model ?? this.config.default_model,
      turnCount: this.sessions.turnCount(stored.id),
      turn: null,
      endedTurnIds: [],
      recommendation: null,
      feedback: stored.parent_session_id === null ? new FeedbackMemory() : null,
      inactivityTimer: null,
      ended: stored.status === 'ended',
    };
    this.live.set(session.id, session);
    this.costs.seed(session.id, this.sessions.storedCost(session.id), this.sessions.lastEventId(session.id));
    if (!session.ended) {
      const lastEvent = this.sessions.lastEventId(session.id);
      new TurnEvents(this.bus, this.streaming, session.id, null, false).emit('session.resumed', null, {
        workspace_hash: session.workspaceHash,
        last_event_id_at_resume: lastEvent,
      });
      this.touch(session);
    }
    return session;
  }

  private info(session: LiveSession): SessionInfo {
    return {
      id: session.id,
      workspace_path: session.workspacePath,
      parent_session_id: session.parentSessionId,
      active_model: session.activeModel,
      routing_policy_version: this.routing.version,
      turn_count: session.turnCount,
      cost_so_far_usd: this.costs.costOf(session.id),
      current_turn_id: session.turn?.state.turnId ?? null,
      status: session.ended ? 'ended' : 'active',
    };
  }

  private assertOpen(): void {
    if (this.closed) throw new MetisError('METIS_ERR_SESSION_ENDED', 'the runtime is shutting down');
  }
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * A model a session keeps (created with it, or pinned): unlike a one-message override, which the router
 * may reject and record in `route.decided`, it must have a configured provider, or every turn of the
 * session would silently run elsewhere. A provider only marked unavailable for now is accepted.
 */
function assertConfiguredModel(models: ModelRegistry, model: string, field: string): void {
  assertModelId(model, field);
  const resolution = models.resolve(model);
  if (!resolution.ok && resolution.failure === 'not_configured') {
    throw new MetisError(
      'METIS_ERR_INVALID_MODEL',
      `${field}: "${model}" cannot serve turns: ${resolution.detail ?? 'its provider is not configured (an unknown provider, or no API key)'}`,
    );
  }
}

function assertModelId(model: string, field: string): void {
  if (!MODEL_ID.test(model)) {
    throw new MetisError(
      'METIS_ERR_INVALID_MODEL',
      `${field}: "${model}" is not a model id of the form provider:name`,
    );
  }
}

/** Creates the runtime; see {@link Runtime}. */
export function createRuntime(options: RuntimeOptions): Runtime {
  return new Runtime(options);
}
