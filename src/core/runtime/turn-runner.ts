import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { RoutingRule, RuntimeConfig } from '../config/runtime-schema.js';
import { nowMicros } from '../events/clock.js';
import { newId } from '../events/ids.js';
import type { SessionRows } from '../store/store-port.js';
import { memoryPrompt } from './memory/memory-prompt.js';
import { type ConversationMessage, estimateTokens, type ModelAdapter } from './model-adapter.js';
import { type CallingTurn, type CallResult, ModelCaller } from './model-call.js';
import type { ModelRegistry } from './models/model-registry.js';
import type { PatternAdvice } from './patterns/pattern-store.js';
import { decideRoute, type NoRoute, type RouteDecision } from './router.js';
import { joinPrompts, type SkillSessions } from './skills/skill-sessions.js';
import type { DispatchRequest, DispatchResult, ToolDispatcher } from './tool-dispatcher.js';
import { WORKER_FORBIDDEN_TOOLS } from './tools/delegate.js';
import type { Tool } from './tools/tool.js';
import { haltIfFrozen } from './turn-drain.js';
import type { TurnEvents } from './turn-events.js';
import { closeFailedTurn } from './turn-failure.js';
import { TurnProgress } from './turn-progress.js';
import type { CutTurn, StoredToolUse } from './turn-resume-plan.js';
import { cancelTurnState, type TurnOutcome, type TurnState } from './turn-state.js';

// The server reads a cancel's reason against these; they belong to the turn's state (turn-state.ts).

/** A pattern recommendation the chain deferred behind an earlier policy (the user may apply it). */
export interface DeferredPattern {
  readonly routeDecidedId: string;
  readonly chosenModel: string;
  readonly model: string;
  readonly confidence: number;
  /** The rule that won, when a rule did. */
  readonly ruleName: string | null;
}

export interface TurnRequest {
  readonly events: TurnEvents;
  readonly state: TurnState;
  readonly messageText: string;
  readonly overrideModel: string | null;
  readonly stickyModel: string | null;
  readonly delegateModel: string | null;
  readonly workspacePath: string;
  readonly isWorker: boolean;
  /** Tools this turn's model is not offered and may not call (a worker's, set by its delegation). */
  readonly excludedTools?: ReadonlySet<string>;
  /** The client's own tools for this turn (an AG-UI run's frontend tools; client-tools.ts). */
  readonly clientTools?: readonly Tool[];
  /** Earlier messages of the session, read once the turn has started (a failed read fails the turn). */
  readonly history: () => readonly ConversationMessage[];
  readonly sessionAllowed: Set<string>;
  readonly beforeToolExecute?: () => Promise<void>;
  /**
   * Resolves once `turn.started` is stored; the turn calls no model and runs no tool before. When it
   * rejects (storage did not take the event in time) the turn ends cancelled with reason `timeout`,
   * having done nothing, which is what the client's 503 says.
   */
  readonly startGate?: (turnStartedId: string) => Promise<void>;
  /** The pattern store's advice for this turn (absent: pattern routing off, or a worker's turn). */
  readonly advise?: (otherwise: string, toolsInHistory: boolean) => PatternAdvice;
  /** Told when the chain deferred a pattern recommendation, so the user can apply or dismiss it. */
  readonly onDeferredPattern?: (deferred: DeferredPattern) => void;
  /** Awaited before each model call: a reached budget holds the turn there (budget.ts). */
  readonly beforeModelCall?: () => Promise<void>;
  /** Messages sent to the running turn (`multitask: steer`), taken just before each model call. */
  readonly takeSteered?: () => readonly string[];
  /** A turn the last run left open, taken up where its stored events stop (turn-resume-plan.ts). */
  readonly resumeFrom?: CutTurn;
  /** Told of each model call as it ended, to count its spend (budget.ts). */
  readonly afterModelCall?: (
    call: CallResult,
    model: string,
    conversation: readonly ConversationMessage[],
  ) => void;
}

const MAX_LLM_CALLS = 25;

/**
 * The agent loop of one turn, in the canonical order of streaming spec §5.3 and with the causal
 * parents of bus spec §4.3/§8:
 *
 *   turn.started → route.decided → llm.call_started → message.* (streaming) → llm.call_completed
 *     → tool.called → tool.completed|tool.failed → llm.call_started → ... → turn.completed
 *
 * Cancellation ends it with the sequence of §6.2.1 (mid-LLM), §6.2.2/§6.2.3 (tools) or §6.2.4.
 */
export class TurnRunner {
  private readonly caller: ModelCaller;

  constructor(
    private readonly config: RuntimeConfig,
    private readonly models: ModelRegistry,
    private readonly dispatcher: ToolDispatcher,
    private readonly sessions: SessionRows,
    private readonly logger: Logger,
    /** The routing rules in effect now (a policy file can change them while the server runs). */
    private readonly routingRules: () => readonly RoutingRule[] = () => config.routing_rules,
    /** The sessions' skills, whose section leads the system prompt (none: no skills). */
    private readonly skills: SkillSessions | null = null,
  ) {
    this.caller = new ModelCaller(config, dispatcher, sessions, logger);
  }

  /**
   * Runs the turn to its end. Never rejects: whatever throws out of the loop (a storage write refused,
   * an event strict validation rejects, a bug) ends the turn as a failed turn with its terminal events
   * ({@link closeFailedTurn}), so one turn cannot take the server down.
   */
  async run(request: TurnRequest): Promise<TurnOutcome> {
    const startedAt = performance.now();
    try {
      if (request.resumeFrom !== undefined) return await this.resumed(request, request.resumeFrom);
      return await this.loop(request, startedAt);
    } catch (error) {
      return closeFailedTurn(
        request.events,
        request.state,
        this.sessions,
        this.config,
        this.logger,
        error,
        startedAt,
      );
    }
  }

  private async loop(request: TurnRequest, startedAt: number): Promise<TurnOutcome> {
    const { events, state } = request;
    const { conversation, turnStartedId, toolsInHistory } = this.startTurn(request);
    const route = this.route(request, toolsInHistory);
    const progress = new TurnProgress(events, state, turnStartedId, startedAt, route.chosen_model ?? '');
    // A turn.started dropped by lenient validation is never stored: there is nothing to wait for.
    if (request.startGate && turnStartedId !== null) {
      if (!(await passStartGate(request.startGate, turnStartedId, state))) return progress.cancelled();
    }
    return this.routed(request, route, progress, conversation, turnStartedId);
  }

  /**
   * A turn a restart cut, going on in the same turn (docs/runtime.md "Durable turns"): its cut model
   * call was closed at start-up; it ends if only its end was missing, runs the tool calls its last call
   * asked for that did not end (ToolDispatcher.resume), or calls the model again on the stored history.
   */
  private async resumed(request: TurnRequest, cut: CutTurn): Promise<TurnOutcome> {
    const { events, state } = request;
    const startedAt = performance.now() - Math.max(0, nowMicros() - cut.turnStartedUs) / 1000;
    const progress = new TurnProgress(events, state, cut.turnStartedId, startedAt, cut.model ?? '');
    progress.seed(cut.totals);
    // Should this fail, closeFailedTurn ends the turn from the open record: it is started, and routed.
    Object.assign(events.open, {
      turnStarted: true,
      turnStartedId: cut.turnStartedId,
      model: progress.model,
    });
    Object.assign(events.open, { llmCalls: cut.totals.llmCalls, toolCalls: cut.totals.toolCalls });
    const step = cut.step;
    if (step.kind === 'end') return progress.completed(step.stopReason, step.status);
    if (step.kind === 'cancelled') return progress.cancelled();
    const conversation = [...request.history()];
    if (step.kind === 'route') {
      const route = this.route(request, false);
      progress.model = route.chosen_model ?? '';
      return this.routed(request, route, progress, conversation, cut.turnStartedId);
    }
    const resolution = this.models.resolve(progress.model);
    if (!resolution.ok) return progress.completed('end_turn', 'failed', { failure: 'no_model_available' });
    let parent = step.kind === 'call' ? step.parent : null;
    if (step.kind === 'tools') {
      const call = { completedEventId: step.callCompletedId, messageId: step.messageId };
      const dispatched = await this.runTools(request, call, step.uses, step.stored);
      progress.toolCalls += dispatched.toolCallCount;
      if (dispatched.cancelled) return progress.cancelled();
      conversation.push({ role: 'tool', content: dispatched.results });
      parent = dispatched.lastEventId;
    }
    return this.converse(request, progress, resolution.adapter, conversation, parent);
  }

  private routed(
    request: TurnRequest,
    route: RouteDecision | NoRoute,
    progress: TurnProgress,
    conversation: ConversationMessage[],
    turnStartedId: string | null,
  ): Promise<TurnOutcome> | TurnOutcome {
    const { events } = request;
    // No candidate can serve: route.decided needs a chosen model, so there is none; the turn still
    // ends, as a failed turn without model calls (docs/decisions.md "A turn no model can serve").
    const resolution = route.chosen_model === null ? null : this.models.resolve(route.chosen_model);
    if (route.chosen_model === null || !resolution?.ok) {
      this.warnNoRoute(route, request);
      // Why, for every client (not only the server's log): each candidate's verdict and reason.
      return progress.completed('end_turn', 'failed', {
        failure: 'no_model_available',
        routing: route.chain
          .filter((c) => c.verdict !== 'not_applicable')
          .map((c) => `${c.policy}: ${c.verdict}${c.reason ? ` (${c.reason})` : ''}`),
      });
    }
    const decided = events.emit('route.decided', turnStartedId, {
      chosen_model: route.chosen_model,
      winner_index: route.winner_index,
      elapsed_ms: route.elapsed_ms,
      chain: route.chain,
    });
    if (decided.id !== null) this.announcePattern(route, decided.id, request);
    return this.converse(request, progress, resolution.adapter, conversation, turnStartedId);
  }

  /**
   * Emits `turn.started` and stores the user's message. A history that cannot be read still gets its
   * turn.started, then fails the turn.
   */
  private startTurn(request: TurnRequest): {
    conversation: ConversationMessage[];
    turnStartedId: string | null;
    toolsInHistory: boolean;
  } {
    const { events, state } = request;
    const userMessage: ConversationMessage = {
      role: 'user',
      content: [{ type: 'text', text: request.messageText }],
    };
    let history: readonly ConversationMessage[] = [];
    let historyError: unknown = null;
    try {
      history = request.history();
    } catch (error) {
      historyError = error ?? new Error('the session history could not be read');
    }
    const conversation: ConversationMessage[] = [...history, userMessage];
    const toolsInHistory = history.some((m) => m.content.some((b) => b.type === 'tool_use'));
    const turnStarted = events.emit('turn.started', null, {
      user_message_hash: createHash('sha256').update(request.messageText).digest('hex'),
      user_message_text_redacted: null,
      estimated_input_tokens: estimateTokens(conversation),
      has_images: false,
      has_tool_calls_in_history: toolsInHistory,
    });
    if (historyError !== null) throw historyError;
    this.sessions.saveMessage(
      {
        id: newId('msg'),
        session_id: events.sessionId,
        turn_id: state.turnId,
        role: 'user',
        content: userMessage.content as unknown[],
        status: 'complete',
        model: null,
        usage: null,
      },
      turnStarted.id,
    );
    return { conversation, turnStartedId: turnStarted.id, toolsInHistory };
  }

  private route(request: TurnRequest, toolsInHistory: boolean): RouteDecision | NoRoute {
    return decideRoute(
      {
        messageText: request.messageText,
        overrideModel: request.overrideModel,
        stickyModel: request.stickyModel,
        workspacePath: request.workspacePath,
        delegateModel: request.delegateModel,
        advise: request.advise ? (otherwise) => request.advise!(otherwise, toolsInHistory) : undefined,
      },
      this.config,
      this.models,
      this.routingRules(),
    );
  }

  private warnNoRoute(route: RouteDecision | NoRoute, request: TurnRequest): void {
    this.logger.warn(
      {
        session_id: request.events.sessionId,
        turn_id: request.state.turnId,
        chosen_model: route.chosen_model,
        chain: route.chain.map((c) => ({ policy: c.policy, verdict: c.verdict, reason: c.reason })),
      },
      'no model can serve this turn; ending it without a model call',
    );
  }

  /**
   * Model calls, and the tool calls each asks for, until the model ends the turn, the calls run out, or
   * the turn is cancelled; an override switches the model between two calls.
   */
  private async converse(
    request: TurnRequest,
    progress: TurnProgress,
    routedAdapter: ModelAdapter,
    conversation: ConversationMessage[],
    turnStartedId: string | null,
  ): Promise<TurnOutcome> {
    const { events, state } = request;
    const signal = state.controller.signal;
    const turn: CallingTurn = {
      events,
      state,
      isWorker: request.isWorker,
      excludedTools: excludedFor(request),
      clientTools: request.clientTools,
      // A worker works on its task alone: the workspace memory and skills are its planner's.
      systemPrompt: request.isWorker
        ? undefined
        : async () =>
            joinPrompts([
              await this.skills?.systemSection(events.sessionId, state.turnId, request.workspacePath),
              await memoryPrompt(request.workspacePath, this.config.memory.max_bytes, this.logger),
            ]),
    };
    let adapter = routedAdapter;
    let parent = turnStartedId;
    for (;;) {
      await haltIfFrozen(events);
      if (signal.aborted) return progress.cancelled();
      // A budget pauses here, between two calls: no call is cut (issue 31).
      await request.beforeModelCall?.();
      if (signal.aborted) return progress.cancelled();
      this.steerIn(request, conversation, parent);
      const redirect = state.redirect ?? null;
      if (redirect !== null) {
        // Emitted here, after the cut call's message.complete and llm.call_failed, so that a client
        // reads the swap between the two calls it separates.
        state.redirect = null;
        progress.model = redirect.model;
        adapter = redirect.adapter;
        parent = events.emit('route.overridden', redirect.routeDecidedId, redirect.payload).id;
      }
      const call = await this.caller.call(adapter, progress.model, conversation, parent, turn);
      await haltIfFrozen(events);
      progress.addCall(call);
      request.afterModelCall?.(call, progress.model, conversation);
      // An override cut the call, or came as it finished: the turn goes on with the new model.
      if (call.kind === 'redirected' || (call.kind === 'completed' && state.redirect)) continue;
      if (call.kind !== 'completed') {
        return call.kind === 'cancelled' ? progress.cancelled() : progress.completed('end_turn', 'failed');
      }
      conversation.push({ role: 'assistant', content: call.content });
      const toolUses = call.content.filter((b) => b.type === 'tool_use');
      if (call.stopReason !== 'tool_use' || toolUses.length === 0 || progress.llmCalls >= MAX_LLM_CALLS) {
        // Cancelled after the last call completed: the cancel was accepted, so the turn ends cancelled.
        if (signal.aborted) return progress.cancelled();
        return progress.completed(call.stopReason, 'completed');
      }
      const dispatched = await this.runTools(request, call, toolUses);
      progress.toolCalls += dispatched.toolCallCount;
      if (dispatched.cancelled) return progress.cancelled();
      conversation.push({ role: 'tool', content: dispatched.results });
      parent = dispatched.lastEventId;
    }
  }

  /**
   * Steered messages join the turn as user messages, stored in the turn (visible with the event before
   * them), so the next call, the history and every client's message list have them (no new event type).
   */
  private steerIn(request: TurnRequest, conversation: ConversationMessage[], parent: string | null): void {
    for (const text of request.takeSteered?.() ?? []) {
      const content: ConversationMessage['content'] = [{ type: 'text', text }];
      conversation.push({ role: 'user', content });
      this.sessions.saveMessage(
        {
          id: newId('msg'),
          session_id: request.events.sessionId,
          turn_id: request.state.turnId,
          role: 'user',
          content: content as unknown[],
          status: 'complete',
          model: null,
          usage: null,
        },
        parent,
      );
    }
  }

  /** Runs the tool uses of a completed call and stores their results as the turn's tool message. */
  private async runTools(
    request: TurnRequest,
    call: { completedEventId: string | null; messageId: string },
    toolUses: DispatchRequest['toolUses'],
    /** A resumed turn's tool uses, as the store has them (ToolDispatcher.resume). */
    stored?: ReadonlyMap<string, StoredToolUse>,
  ): Promise<DispatchResult> {
    const { events, state } = request;
    const dispatch = (r: DispatchRequest) =>
      stored === undefined ? this.dispatcher.dispatch(r) : this.dispatcher.resume(r, stored);
    const dispatched = await dispatch({
      events,
      toolUses,
      callCompletedId: call.completedEventId,
      messageId: call.messageId,
      workspacePath: request.workspacePath,
      signal: state.controller.signal,
      sessionAllowed: request.sessionAllowed,
      beforeExecute: request.beforeToolExecute,
      excludedTools: excludedFor(request),
      clientTools: request.clientTools,
    });
    await haltIfFrozen(events);
    this.sessions.saveMessage(
      {
        id: newId('msg'),
        session_id: events.sessionId,
        turn_id: state.turnId,
        role: 'tool',
        content: dispatched.results,
        status: dispatched.cancelled ? 'cancelled' : 'complete',
        model: null,
        usage: null,
      },
      dispatched.lastEventId,
    );
    return dispatched;
  }

  /** `pattern.matched` when slot 4 chose; the user is told of a recommendation deferred behind a rule. */
  private announcePattern(route: RouteDecision, decidedId: string, request: TurnRequest): void {
    const entry = route.chain.find((c) => c.policy === 'pattern');
    const advice = route.pattern;
    if (entry === undefined || advice === null || advice.model === null || advice.fingerprintId === null)
      return;
    if (entry.verdict === 'chose') {
      request.events.emit('pattern.matched', decidedId, {
        fingerprint_id: advice.fingerprintId,
        fingerprint_kind: 'structural',
        chosen_model: route.chosen_model,
        confidence: advice.confidence ?? 0,
        sample_size: advice.sampleSize,
        k_cluster_size: advice.clusterSize,
        alternatives_count: advice.alternatives?.length ?? 0,
      });
    } else if (entry.verdict === 'deferred') {
      request.onDeferredPattern?.({
        routeDecidedId: decidedId,
        chosenModel: route.chosen_model,
        model: advice.model,
        confidence: advice.confidence ?? 0,
        ruleName: route.chain[route.winner_index]?.rule_name ?? null,
      });
    }
  }
}

/**
 * Waits for `turn.started` to be stored (TurnRequest.startGate). False when the turn is to end
 * cancelled instead: the wait failed (as `timeout`), or a cancel came meanwhile.
 */
async function passStartGate(
  gate: (turnStartedId: string) => Promise<void>,
  turnStartedId: string,
  state: TurnState,
): Promise<boolean> {
  try {
    await gate(turnStartedId);
  } catch {
    cancelTurnState(state, 'timeout');
    return false;
  }
  return !state.controller.signal.aborted;
}

function excludedFor(request: TurnRequest): ReadonlySet<string> | undefined {
  return request.excludedTools ?? (request.isWorker ? WORKER_FORBIDDEN_TOOLS : undefined);
}
