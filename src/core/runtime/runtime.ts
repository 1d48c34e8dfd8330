import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { type RuntimeConfig, type RuntimeConfigInput, runtimeConfig } from '../config/runtime-schema.js';
import type { ConfirmationRequest } from '../confirmation-request.js';
import { MetisError } from '../errors.js';
import { newId } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import { isSelfOrAncestor, selfAndDescendants } from '../store/session-lineage.js';
import type { StorePort } from '../store/store-port.js';
import { DEFAULT_COMMIT_WAIT_MS } from '../store/store-writer.js';
import { Budgets } from './budget.js';
import type { ChildProcessRecord } from './child-process-record.js';
import { type ClientToolDeclaration, ClientToolResults } from './client-tools.js';
import { ConfirmationBroker } from './confirmations.js';
import { CostAccumulator } from './cost-accumulator.js';
import { Delegations } from './delegations.js';
import type { Evaluator } from './evaluator/evaluator.js';
import type { Judge } from './evaluator/judge.js';
import { emitSignal } from './implicit-feedback.js';
import { type LiveSession, LiveSessions, type SessionInfo } from './live-sessions.js';
import { assertConfiguredModel, assertModelId } from './models/model-id.js';
import { ModelRegistry } from './models/model-registry.js';
import type { OwnerRows } from './owner-rows.js';
import { ownerStorePort } from './owner-store-port.js';
import { adviserFor, applyRecommendation, dismissRecommendation } from './pattern-recommendation.js';
import type { PatternRecorder } from './patterns/pattern-recorder.js';
import type { PatternStore } from './patterns/pattern-store.js';
import { ProviderHealth } from './provider-health.js';
import { logRedundantCancel } from './redundant-cancel.js';
import { RoutingPolicy } from './routing-policy.js';
import { runtimeScoring } from './runtime-scoring.js';
import { runtimeTools } from './runtime-tools.js';
import { attachedSkillSessions, type SkillSessions } from './skills/skill-sessions.js';
import { StreamingChannel } from './streaming-channel.js';
import { ToolDispatcher } from './tool-dispatcher.js';
import type { Tool } from './tools/tool.js';
import { drainTurns, isHandedOver, trackTurnEvents } from './turn-drain.js';
import { TurnEvents } from './turn-events.js';
import { failedOutsideTheLoop } from './turn-progress.js';
import { TurnQueues } from './turn-queue.js';
import { queueHost, turnHooks } from './turn-queue-hooks.js';
import type { CutTurn } from './turn-resume-plan.js';
import { TurnRunner } from './turn-runner.js';
import { type CancelReason, cancelTurnState, type TurnOutcome, type TurnState } from './turn-state.js';

export interface RuntimeOptions {
  readonly bus: EventBus;
  /** Sessions, lookups and patterns (the store port): the runtime touches no database itself. */
  readonly store: StorePort;
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
  /** This server's own secrets (`metis serve`: its config file and database, and the files named after
   * them), wherever they are: file tools always ask before reading them. */
  readonly protectedPaths?: readonly string[];
  /** The evaluator's judge (default: the heuristic one; an LLM judge implements the same interface). */
  readonly judge?: Judge;
}

export type { SessionInfo } from './live-sessions.js';

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
  /** The session rows: those of the sessions this process holds from memory, others from the store. */
  readonly sessions: OwnerRows;
  readonly models: ModelRegistry;
  readonly confirmations = new ConfirmationBroker();
  /** Results of the client's own tools (an AG-UI run's frontend tools), which their calls wait for. */
  readonly clientToolResults: ClientToolResults;
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
  private readonly live: LiveSessions;
  private readonly skills: SkillSessions;
  /** The routing rules in effect and their version (runtime.routing_policy_file, re-read on change). */
  readonly routing: RoutingPolicy;
  /** Messages sent while a turn runs (issue 31 multitask), and the caps that pause turns. */
  readonly turnQueues: TurnQueues;
  readonly budgets: Budgets;
  private readonly beforeToolExecute?: () => Promise<void>;
  /** A user's turn waits for its `turn.started` to be stored before it calls a model (see TurnRequest). */
  private readonly startGate?: (turnStartedId: string) => Promise<void>;
  private closed = false;
  private draining = false;
  handedOver = 0;

  constructor(options: RuntimeOptions) {
    this.bus = options.bus;
    this.config = runtimeConfig(options.config);
    this.logger = options.logger ?? silentLogger();
    this.streaming = options.streaming ?? new StreamingChannel();
    const store = ownerStorePort(options.store);
    this.sessions = store.sessions;
    this.models = new ModelRegistry(this.config);
    this.health = new ProviderHealth(this.config.provider_health);
    this.models.health = this.health;
    this.beforeToolExecute = options.beforeToolExecute;
    this.startGate = (id) => options.store.whenStored(id, DEFAULT_COMMIT_WAIT_MS);
    this.skills = attachedSkillSessions(this.bus, this.config, this.logger);
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
    this.live = new LiveSessions({
      bus: this.bus,
      streaming: this.streaming,
      sessions: this.sessions,
      sessionReads: store.sessionReads,
      families: store.families,
      settled: () => store.settled(DEFAULT_COMMIT_WAIT_MS),
      config: this.config,
      costs: this.costs,
      logger: this.logger,
      mayResume: options.mayResume ?? (() => true),
      routingVersion: () => this.routing.version,
      closed: () => this.closed,
    });
    this.budgets = new Budgets(this.bus, this.config, this.live, this.logger, store.budgets);
    this.turnQueues = new TurnQueues(queueHost(this, this.logger, () => this.closed, store.queues));
    const delegations: Delegations = new Delegations(this.bus, this.streaming, this.config, this.models, {
      startWorker: (parent, model, sessionId) =>
        this.createSession({
          workspacePath: parent.workspacePath,
          model,
          parentSessionId: parent.id,
          sessionId,
        }),
      runWorkerTurn: (sessionId, task, model, state, excludedTools) =>
        this.runTurn(this.live.require(sessionId), task, null, model, state, excludedTools),
      toolNames: (): string[] => dispatcher.available().map((tool: Tool) => tool.name),
      endWorker: (sessionId, disposition) => this.endSession(sessionId, disposition),
      session: (id) => this.live.require(id),
    });
    const tools = runtimeTools({
      bus: this.bus,
      config: this.config,
      skills: this.skills,
      delegations,
      childProcesses: options.childProcesses,
      protectedPaths: options.protectedPaths,
      extra: options.tools,
    });
    const dispatcher = new ToolDispatcher(tools, this.config, this.sessions, this.confirmations, this.logger);
    this.clientToolResults = new ClientToolResults(tools.map((tool) => tool.name));
    this.runner = new TurnRunner(
      this.config,
      this.models,
      dispatcher,
      this.sessions,
      this.logger,
      () => this.routing.rules,
      this.skills,
    );
    this.costs.attach(this.bus);
    this.health.attach(this.bus);
    ({
      patterns: this.patterns,
      patternRecorder: this.patternRecorder,
      evaluator: this.evaluator,
    } = runtimeScoring({
      bus: this.bus,
      config: this.config,
      store,
      patternRows: options.store.patterns,
      models: this.models,
      logger: this.logger,
      judge: options.judge,
    }));
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
    return this.live.info(this.live.create(options));
  }

  /**
   * Submits a user message. Resolves at once with the turn id; `done` settles when the turn ends.
   * `clientTools` are offered to the model beside metis's; their calls wait for the client's result
   * (`clientToolResults.deliver`), at most `confirmation_timeout_ms` each.
   * @throws MetisError when the session is unknown or ended, or a turn is already in flight.
   */
  submitTurn(
    sessionId: string,
    message: string,
    options: { model?: string | null; clientTools?: readonly ClientToolDeclaration[] } = {},
  ) {
    this.assertOpen();
    const session = this.live.require(sessionId);
    if (session.ended) throw new MetisError('METIS_ERR_SESSION_ENDED', `session ${sessionId} has ended`);
    if (session.turn !== null) {
      throw new MetisError(
        'METIS_ERR_TURN_IN_FLIGHT',
        `session ${sessionId} already has turn ${session.turn.state.turnId} in flight`,
      );
    }
    if (options.model) assertModelId(options.model, 'model');
    const timeoutMs = this.config.confirmation_timeout_ms;
    const tools = this.clientToolResults.toolsFor(session.id, options.clientTools ?? [], timeoutMs);
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
    const model = options.model ?? null;
    const done = this.runTurn(session, message, model, null, state, undefined, startGate, tools);
    return { turnId: state.turnId, done };
  }

  /**
   * Cancels the turn in flight (streaming §6). Cancel is idempotent (§6.5, docs/decisions.md
   * "Redundant cancel"): a turn of this session that is already cancelling or has ended, in this process
   * or an earlier one, is left alone and logged as `bus.handler_warning`, with no event.
   * @throws MetisError METIS_ERR_TURN_NOT_FOUND when the session never had that turn.
   */
  cancelTurn(sessionId: string, turnId: string, reason: CancelReason = 'user_cancel'): CancelOutcome {
    const session = this.live.require(sessionId);
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
    logRedundantCancel(this.logger, session, {
      sessionId,
      turnId,
      reason,
      cancellingReason: turn?.state.turnId === turnId ? turn.state.cancelReason : null,
      outcome,
    });
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
    reason?: string,
  ): void {
    this.live.require(sessionId);
    this.confirmations.answer(sessionId, requestId, decision, scope, client, {
      mayAnswer: (owner) => isSelfOrAncestor(this.sessions, sessionId, owner),
      inputHash,
      reason,
    });
  }

  /** Confirmations waiting in a session and its workers, full input (a turn running here asks them). */
  pendingConfirmations(sessionId: string): ConfirmationRequest[] {
    if (this.live.runsElsewhere(sessionId)) {
      this.live.storedInfo(sessionId);
      return this.sessions.unansweredConfirmations(selfAndDescendants(this.sessions, sessionId));
    }
    // Walked up from each waiting request's session, which runs here: no read when none waits.
    return this.confirmations
      .waiting()
      .filter((r) => isSelfOrAncestor(this.sessions, sessionId, r.session_id));
  }

  /** Sets the session's sticky model (the `manual_sticky` routing policy). */
  setStickyModel(sessionId: string, model: string): SessionInfo {
    assertConfiguredModel(this.models, model, 'model');
    const session = this.live.require(sessionId);
    const swap =
      session.turn === null ? (session.feedback?.onModelSwap(session.activeModel, model) ?? null) : null;
    if (swap !== null) emitSignal(this.bus, session.id, swap, null);
    session.stickyModel = model;
    session.activeModel = model;
    this.sessions.setStickyModel(sessionId, model);
    return this.live.info(session);
  }

  /** Ends a session with `session.ended`. Ending an ended session does nothing. */
  endSession(sessionId: string, disposition: 'completed' | 'abandoned' | 'error' = 'completed'): void {
    this.live.end(sessionId, disposition);
    this.turnQueues.forget(sessionId);
    this.budgets.forget(sessionId);
  }

  /** Loads a stored session and its workers into memory, so running it reads no store: gates await it. */
  open(sessionId: string): Promise<void> {
    return this.live.open(sessionId);
  }

  /** The session taken up to act on it (session.resumed when stored): what a change starts from. */
  getSession(sessionId: string): SessionInfo {
    if (this.live.runsElsewhere(sessionId)) return this.live.storedInfo(sessionId);
    return this.live.info(this.live.require(sessionId));
  }

  /** The session as it stands, not taken up (LiveSessions.describe): what a read answers. */
  describe = (sessionId: string): Promise<SessionInfo> => this.live.describe(sessionId);

  hasSession = (id: string): boolean => this.live.has(id) || this.sessions.getSession(id) !== null;

  /** Whether a session of this id exists, for a request or a stream naming it (LiveSessions.known). */
  knowsSession = (sessionId: string): Promise<boolean> => this.live.known(sessionId);
  /** Whether another node runs the session: this process neither holds it nor may take it up. */
  runsElsewhere = (sessionId: string): boolean => this.live.runsElsewhere(sessionId);

  /** Drops a session with no turn in flight (false while one runs): its next use loads it again. */
  release(sessionId: string): boolean {
    return this.live.release(sessionId);
  }

  /** The turn in flight, if any: the runtime's `done` promise for tests and shutdown. */
  currentTurn(sessionId: string): { turnId: string; done: Promise<TurnOutcome> } | null {
    if (this.live.runsElsewhere(sessionId)) return null;
    const turn = this.live.require(sessionId).turn;
    return turn ? { turnId: turn.state.turnId, done: turn.done } : null;
  }

  /** The turn running here now, from memory alone (no store read, no take-up): what a read answers. */
  runningTurnId = (sessionId: string): string | null =>
    this.live.has(sessionId) ? (this.currentTurn(sessionId)?.turnId ?? null) : null;

  /** Takes up a turn the last run left open, where the store shows it stopped (docs/runtime.md). */
  resumeTurn(cut: CutTurn): Promise<TurnOutcome> {
    const state: TurnState = { turnId: cut.turnId, controller: new AbortController(), cancelReason: null };
    const session = this.live.require(cut.sessionId);
    return this.runTurn(session, cut.userText, null, null, state, undefined, undefined, undefined, cut);
  }

  /**
   * Cancels every turn in flight and waits for them to end. Safe to call twice. With `handOver`: drains,
   * then hands the turns still running after `waitMs` over to the next start (turn-drain.ts).
   */
  async close(handOver?: { waitMs: number }): Promise<void> {
    if (this.closed || this.draining) return;
    this.draining = handOver !== undefined;
    this.turnQueues.forgetAll();
    if (handOver) this.handedOver = await drainTurns(() => this.live.all(), handOver.waitMs);
    this.closed = true;
    const pending: Promise<unknown>[] = [];
    for (const session of this.live.all()) {
      if (session.inactivityTimer) clearTimeout(session.inactivityTimer);
      if (session.turn && !session.isWorker && !isHandedOver(session.turn.state)) {
        cancelTurnState(session.turn.state, 'client_disconnect');
        pending.push(session.turn.done.catch(() => undefined));
      }
    }
    await Promise.all(pending);
    await this.evaluator?.close();
    this.costs.detach(this.bus);
    this.routing.close();
    this.health.detach(this.bus);
    this.skills.close();
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
    clientTools?: readonly Tool[],
    resumeFrom?: CutTurn,
  ): Promise<TurnOutcome> {
    const timer = setTimeout(() => cancelTurnState(state, 'timeout'), this.config.turn_timeout_ms);
    session.recommendation = null;
    const entry = { state, timer, done: undefined as unknown as Promise<TurnOutcome> };
    session.turn = entry;
    if (resumeFrom === undefined) session.turnCount += 1;
    const events = new TurnEvents(this.bus, this.streaming, session.id, state.turnId, session.isWorker);
    trackTurnEvents(state, events);
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
        clientTools,
        history: () => this.live.history(session.id),
        ...turnHooks(this.turnQueues, this.budgets, session.id, state),
        sessionAllowed: session.sessionAllowed,
        beforeToolExecute: this.beforeToolExecute,
        startGate,
        resumeFrom,
        advise: adviserFor(this.patterns, session)?.(message),
        onDeferredPattern: (deferred) => {
          session.recommendation = { ...deferred, turnId: state.turnId };
        },
      })
      .catch(failedOutsideTheLoop(this.logger, session.id, state.turnId))
      .then((outcome) => {
        clearTimeout(timer);
        if (clientTools !== undefined) this.clientToolResults.forget(session.id);
        this.live.turnEnded(session, state.turnId, outcome);
        this.turnQueues.turnEnded(session.id, state.turnId);
        return outcome;
      });
    return entry.done;
  }

  /** Applies the pattern recommendation deferred in the running turn (see applyRecommendation). */
  overrideRoute(sessionId: string): ReturnType<typeof applyRecommendation> {
    return applyRecommendation(this.live.require(sessionId), this.models);
  }

  /** Dismisses the pending pattern recommendation (see dismissRecommendation). */
  dismissRecommendation(sessionId: string): ReturnType<typeof dismissRecommendation> {
    return dismissRecommendation(this.live.require(sessionId), this.bus);
  }

  /** Clears the pattern store (`pattern.evicted` manual_clear in the system session). */
  clearPatterns(): { entries_evicted: number } {
    if (this.patterns === null || this.patternRecorder === null)
      throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'pattern routing is off (runtime.patterns.enabled)');
    const eviction = this.patterns.clear();
    this.patternRecorder.evicted('system', eviction, null);
    return { entries_evicted: eviction.entries_evicted };
  }

  private assertOpen(): void {
    if (this.draining)
      throw new MetisError('METIS_ERR_SERVER_DRAINING', 'the server is stopping: it takes no new turn');
    if (this.closed) throw new MetisError('METIS_ERR_SESSION_ENDED', 'the runtime is shutting down');
  }
}

/** Creates the runtime; see {@link Runtime}. */
export function createRuntime(options: RuntimeOptions): Runtime {
  return new Runtime(options);
}
