import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { RoutingRule, RuntimeConfig } from '../config/runtime-schema.js';
import { newId } from '../events/ids.js';
import type { SessionStore } from '../store/session-store.js';
import { MessageBuilder } from './message-builder.js';
import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ContentBlock,
  type ConversationMessage,
  estimateTokens,
  type ModelAdapter,
  type TokenUsage,
  type ToolSpec,
} from './model-adapter.js';
import type { ModelRegistry } from './models/model-registry.js';
import type { PatternAdvice } from './patterns/pattern-store.js';
import { costOf } from './pricing.js';
import { decideRoute, type RouteDecision } from './router.js';
import type { ToolDispatcher } from './tool-dispatcher.js';
import { WORKER_FORBIDDEN_TOOLS } from './tools/delegate.js';
import type { Tool } from './tools/tool.js';
import type { TurnEvents } from './turn-events.js';
import { closeFailedTurn, redact } from './turn-failure.js';

export { redact };

/** Why a turn was cancelled (streaming §6: `turn.cancelled.reason`). */
export const CANCEL_REASONS = ['user_cancel', 'client_disconnect', 'timeout'] as const;
export type CancelReason = (typeof CANCEL_REASONS)[number];

export function isCancelReason(value: unknown): value is CancelReason {
  return (CANCEL_REASONS as readonly unknown[]).includes(value);
}

/**
 * Cancels a turn once: records why, then aborts its signal with the reason, so that what runs under the
 * turn (a delegated worker) can cancel for the same reason. False when it was already cancelling.
 */
export function cancelTurnState(state: TurnState, reason: CancelReason): boolean {
  if (state.cancelReason !== null) return false;
  state.cancelReason = reason;
  state.controller.abort(reason);
  return true;
}

/** The live state of one turn; `cancel` flips it to cancelling exactly once. */
export interface TurnState {
  readonly turnId: string;
  readonly controller: AbortController;
  cancelReason: CancelReason | null;
  /** A user override (`route.overridden`) the loop has not applied yet: the next model call uses it. */
  redirect?: Redirect | null;
  /** Aborts the model call in flight only (an override cuts it); the turn goes on. */
  callAbort?: AbortController | null;
  /** Set, synchronously, as the turn emits its terminal event: nothing can be re-dispatched after. */
  ending?: boolean;
}

/** Where an override sends the rest of a turn. */
export interface Redirect {
  readonly model: string;
  readonly adapter: ModelAdapter;
  /** The decision overridden: parent of `route.overridden`, which parents the next `llm.call_started`. */
  readonly routeDecidedId: string;
  /** The `route.overridden` payload, emitted once the call in flight is closed. */
  readonly payload: Record<string, unknown>;
}

/**
 * Re-dispatches a running turn to another model (bus §6.5b): the call in flight, if any, is cut, and the
 * next call goes to `redirect.model`. False when the turn is already ending.
 */
export function redirectTurn(state: TurnState, redirect: Redirect): boolean {
  if (state.ending === true || state.cancelReason !== null) return false;
  state.redirect = redirect;
  state.callAbort?.abort('route_overridden');
  return true;
}

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
}

export interface TurnOutcome {
  readonly status: 'completed' | 'cancelled' | 'failed';
  readonly model: string;
  readonly finalText: string;
  readonly llmCalls: number;
  readonly toolCalls: number;
  readonly costUsd: number;
  readonly wallTimeSeconds: number;
}

const MAX_LLM_CALLS = 25;

type CallResult =
  | { kind: 'cancelled' | 'failed' | 'redirected'; usage: TokenUsage; costUsd: number; text: string }
  | {
      kind: 'completed';
      usage: TokenUsage;
      costUsd: number;
      text: string;
      content: ContentBlock[];
      stopReason: AdapterResult['stop_reason'];
      completedEventId: string | null;
      messageId: string;
    };

const EMPTY_USAGE: TokenUsage = {
  input_tokens: 0,
  output_tokens: 0,
  cached_input_tokens: 0,
  cache_creation_input_tokens: 0,
};

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
  constructor(
    private readonly config: RuntimeConfig,
    private readonly models: ModelRegistry,
    private readonly dispatcher: ToolDispatcher,
    private readonly sessions: SessionStore,
    private readonly logger: Logger,
    /** The routing rules in effect now (a policy file can change them while the server runs). */
    private readonly routingRules: () => readonly RoutingRule[] = () => config.routing_rules,
  ) {}

  /**
   * Runs the turn to its end. Never rejects: whatever throws out of the loop (a storage write refused,
   * an event strict validation rejects, a bug) ends the turn as a failed turn with its terminal events
   * ({@link closeFailedTurn}), so one turn cannot take the server down.
   */
  async run(request: TurnRequest): Promise<TurnOutcome> {
    const startedAt = performance.now();
    try {
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
    const signal = state.controller.signal;
    const userMessage: ConversationMessage = {
      role: 'user',
      content: [{ type: 'text', text: request.messageText }],
    };
    // A history that cannot be read still gets its turn.started, then fails the turn below.
    let history: readonly ConversationMessage[] = [];
    let historyError: unknown = null;
    try {
      history = request.history();
    } catch (error) {
      historyError = error ?? new Error('the session history could not be read');
    }
    const conversation: ConversationMessage[] = [...history, userMessage];
    const totals = { llmCalls: 0, toolCalls: 0, input: 0, output: 0, cost: 0 };

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
    const route = decideRoute(
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
    // Empty only on the no-route path below, where no model serves the turn; an override changes it.
    let model = route.chosen_model ?? '';

    const outcome = (status: TurnOutcome['status'], finalText: string): TurnOutcome => ({
      status,
      model,
      finalText,
      llmCalls: totals.llmCalls,
      toolCalls: totals.toolCalls,
      costUsd: totals.cost,
      wallTimeSeconds: (performance.now() - startedAt) / 1000,
    });
    const cancelled = (finalText: string): TurnOutcome => {
      state.ending = true;
      events.emit('turn.cancelled', turnStarted.id, {
        reason: state.cancelReason ?? 'user_cancel',
        partial_llm_calls: totals.llmCalls,
        partial_tool_calls: totals.toolCalls,
      });
      return outcome('cancelled', finalText);
    };
    const completed = (
      stopReason: AdapterResult['stop_reason'],
      finalText: string,
      status: TurnOutcome['status'],
    ) => {
      state.ending = true;
      events.emit('turn.completed', turnStarted.id, {
        stop_reason: stopReason,
        llm_call_count: totals.llmCalls,
        tool_call_count: totals.toolCalls,
        total_input_tokens: totals.input,
        total_output_tokens: totals.output,
        total_cost_usd: totals.cost,
        wall_time_seconds: (performance.now() - startedAt) / 1000,
      });
      return outcome(status, finalText);
    };

    // A turn.started dropped by lenient validation is never stored: there is nothing to wait for.
    if (request.startGate && turnStarted.id !== null) {
      try {
        await request.startGate(turnStarted.id);
      } catch {
        cancelTurnState(state, 'timeout');
        return cancelled('');
      }
      if (signal.aborted) return cancelled('');
    }

    // No candidate can serve: route.decided needs a chosen model, so there is none; the turn still
    // ends, as a failed turn without model calls (docs/decisions.md "A turn no model can serve").
    const chosen = route.chosen_model;
    const resolution = chosen === null ? null : this.models.resolve(chosen);
    if (chosen === null || resolution === null || !resolution.ok) {
      this.logger.warn(
        {
          session_id: events.sessionId,
          turn_id: state.turnId,
          chosen_model: route.chosen_model,
          chain: route.chain.map((c) => ({ policy: c.policy, verdict: c.verdict, reason: c.reason })),
        },
        'no model can serve this turn; ending it without a model call',
      );
      return completed('end_turn', '', 'failed');
    }
    const decided = events.emit('route.decided', turnStarted.id, {
      chosen_model: route.chosen_model,
      winner_index: route.winner_index,
      elapsed_ms: route.elapsed_ms,
      chain: route.chain,
    });
    if (decided.id !== null) this.announcePattern(route, decided.id, request);
    let adapter = resolution.adapter;

    let parent: string | null = turnStarted.id;
    let finalText = '';
    for (;;) {
      if (signal.aborted) return cancelled(finalText);
      const redirect = state.redirect ?? null;
      if (redirect !== null) {
        // Emitted here, after the cut call's message.complete and llm.call_failed, so that a client
        // reads the swap between the two calls it separates.
        state.redirect = null;
        model = redirect.model;
        adapter = redirect.adapter;
        parent = events.emit('route.overridden', redirect.routeDecidedId, redirect.payload).id;
      }
      const call = await this.callModel(adapter, model, conversation, parent, request);
      totals.llmCalls += 1;
      totals.input += call.usage.input_tokens;
      totals.output += call.usage.output_tokens;
      totals.cost += call.costUsd;
      finalText = call.text || finalText;
      // An override cut the call, or came as it finished: the turn goes on with the new model.
      if (call.kind === 'redirected' || (call.kind === 'completed' && state.redirect)) continue;
      if (call.kind !== 'completed') {
        return call.kind === 'cancelled' ? cancelled(finalText) : completed('end_turn', finalText, 'failed');
      }
      conversation.push({ role: 'assistant', content: call.content });
      const toolUses = call.content.filter((b) => b.type === 'tool_use');
      if (call.stopReason !== 'tool_use' || toolUses.length === 0 || totals.llmCalls >= MAX_LLM_CALLS) {
        // Cancelled after the last call completed: the cancel was accepted, so the turn ends cancelled.
        if (signal.aborted) return cancelled(finalText);
        return completed(call.stopReason, finalText, 'completed');
      }
      const dispatched = await this.dispatcher.dispatch({
        events,
        toolUses,
        callCompletedId: call.completedEventId,
        messageId: call.messageId,
        workspacePath: request.workspacePath,
        signal,
        sessionAllowed: request.sessionAllowed,
        beforeExecute: request.beforeToolExecute,
        excludedTools: excludedFor(request),
      });
      totals.toolCalls += dispatched.toolCallCount;
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
      if (dispatched.cancelled) return cancelled(finalText);
      conversation.push({ role: 'tool', content: dispatched.results });
      parent = dispatched.lastEventId;
    }
  }

  /** One model call: `llm.call_started`, the streamed message, then `llm.call_completed` or `llm.call_failed`. */
  private async callModel(
    adapter: ModelAdapter,
    model: string,
    conversation: readonly ConversationMessage[],
    parent: string | null,
    request: TurnRequest,
  ): Promise<CallResult> {
    const { events, state } = request;
    const signal = state.controller.signal;
    const provider = adapter.provider;
    const callAbort = new AbortController();
    state.callAbort = callAbort;
    const callSignal = AbortSignal.any([signal, callAbort.signal]);
    const started = performance.now();
    const callStarted = events.emit('llm.call_started', parent, {
      model,
      provider,
      estimated_input_tokens: estimateTokens(conversation),
      request_id: newId('req'),
      is_worker: request.isWorker,
    });
    const messageId = newId('msg');
    const messageStart = events.stream('message.start', callStarted.id, {
      message_id: messageId,
      role: 'assistant',
      model,
    });
    const builder = new MessageBuilder();
    events.trackContent(builder);
    const streamChunk = (chunk: AdapterChunk) => {
      builder.add(chunk);
      const [type, payload] = streamingEventOf(messageId, chunk);
      events.stream(type, messageStart.id, payload);
    };

    let result: AdapterResult;
    try {
      const generator = adapter.stream(
        {
          model,
          messages: conversation,
          tools: this.dispatcher.available(excludedFor(request)).map(toolSpecOf),
        },
        callSignal,
      );
      for (;;) {
        const next = await generator.next();
        if (next.done) {
          // A cancel that came with the last chunk finds the stream finished, but message.complete is
          // not out yet: to the client it is still a cancel mid-message (§6.2.1).
          if (callSignal.aborted) throw new AdapterError('cancelled', 'the turn was cancelled');
          result = next.value;
          break;
        }
        if (callSignal.aborted) {
          await generator.return(undefined as never).catch(() => undefined);
          throw new AdapterError('cancelled', 'the turn was cancelled');
        }
        streamChunk(next.value);
      }
    } catch (error) {
      const adapterError =
        error instanceof AdapterError
          ? error
          : new AdapterError('other', (error as Error).message ?? String(error));
      // Only a cancel of this turn makes it a cancelled call: an adapter that reports `cancelled` on its
      // own (its HTTP request aborted elsewhere) failed the call, and the turn ends as failed (§9.1).
      const wasCancelled = signal.aborted;
      // Cut by an override (route.overridden): ended like a cancelled call, and the turn goes on.
      const wasRedirected = !wasCancelled && callAbort.signal.aborted;
      const cutShort = wasCancelled || wasRedirected;
      // Close what the client has open: tool uses without an end, then the message (§6.2.1).
      for (const open of builder.openToolUses()) {
        events.stream('tool.use_end', messageStart.id, {
          message_id: messageId,
          content_block_index: open.index,
          tool_use_id: open.tool_use_id,
          final_input: open.final_input,
        });
      }
      const content = builder.content();
      const usage = { ...EMPTY_USAGE, cost_usd: 0, pricing_version: this.config.pricing_version };
      // Cut short either way: `cancelled` is the spec's stop reason for a partial message (§6.2.1); a
      // failure adds the class `llm.call_failed` reports, so the message itself says what happened.
      const cut = events.stream('message.complete', messageStart.id, {
        message_id: messageId,
        stop_reason: 'cancelled',
        final_content: content,
        usage,
        ...(cutShort ? {} : { error_class: adapterError.errorClass }),
      });
      this.saveAssistant(request, messageId, content, cutShort ? 'cancelled' : 'error', model, usage, cut.id);
      if (!cutShort) this.logger.warn({ model, error_class: adapterError.errorClass }, 'model call failed');
      events.emit('llm.call_failed', callStarted.id, {
        model,
        provider,
        error_class: cutShort ? 'cancelled' : adapterError.errorClass,
        error_message_redacted: wasRedirected
          ? 'cut by route.overridden: the turn goes on with another model'
          : redact(adapterError.message),
        retry_count: adapterError.retryCount,
        latency_ms: Math.round(performance.now() - started),
        provider_request_id: adapterError.providerRequestId,
      });
      return {
        kind: wasCancelled ? 'cancelled' : wasRedirected ? 'redirected' : 'failed',
        usage: EMPTY_USAGE,
        costUsd: 0,
        text: textOf(content),
      };
    }

    const content = builder.content();
    const costUsd = costOf(model, result.usage, this.config);
    const usage = { ...result.usage, cost_usd: costUsd, pricing_version: this.config.pricing_version };
    const complete = events.stream('message.complete', messageStart.id, {
      message_id: messageId,
      stop_reason: result.stop_reason,
      final_content: content,
      usage,
    });
    this.saveAssistant(request, messageId, content, 'complete', model, usage, complete.id);
    const completed = events.emit('llm.call_completed', callStarted.id, {
      model,
      provider,
      ...result.usage,
      cost_usd: costUsd,
      pricing_version: this.config.pricing_version,
      latency_ms: Math.round(performance.now() - started),
      stop_reason: result.stop_reason,
      produced_tool_calls: content.filter((b) => b.type === 'tool_use').length,
      produced_thinking_blocks: content.filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking')
        .length,
      provider_request_id: result.provider_request_id,
    });
    return {
      kind: 'completed',
      usage: result.usage,
      costUsd,
      text: textOf(content),
      content,
      stopReason: result.stop_reason,
      completedEventId: completed.id,
      messageId,
    };
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

  private saveAssistant(
    request: TurnRequest,
    messageId: string,
    content: unknown[],
    status: 'complete' | 'cancelled' | 'error',
    model: string,
    usage: Record<string, unknown>,
    completeEventId: string,
  ): void {
    this.sessions.saveMessage(
      {
        id: messageId,
        session_id: request.events.sessionId,
        turn_id: request.state.turnId,
        role: 'assistant',
        content,
        status,
        model,
        usage,
      },
      completeEventId,
    );
  }
}

function excludedFor(request: TurnRequest): ReadonlySet<string> | undefined {
  return request.excludedTools ?? (request.isWorker ? WORKER_FORBIDDEN_TOOLS : undefined);
}

function streamingEventOf(messageId: string, chunk: AdapterChunk): [string, Record<string, unknown>] {
  const base = { message_id: messageId, content_block_index: chunk.index };
  switch (chunk.kind) {
    case 'text':
      return ['text.delta', { ...base, text: chunk.text }];
    case 'thinking':
      return ['thinking.delta', { ...base, text: chunk.text, signature: chunk.signature }];
    case 'redacted_thinking':
      // Redacted thinking has no readable text; clients get the block at message.complete.
      return ['thinking.delta', { ...base, text: '', signature: null }];
    case 'tool_use_start':
      return ['tool.use_start', { ...base, tool_use_id: chunk.tool_use_id, tool_name: chunk.tool_name }];
    case 'tool_input':
      return [
        'tool.use_input_delta',
        { ...base, tool_use_id: chunk.tool_use_id, partial_json: chunk.partial_json },
      ];
    case 'tool_use_end':
      return ['tool.use_end', { ...base, tool_use_id: chunk.tool_use_id, final_input: chunk.final_input }];
  }
}

function toolSpecOf(tool: Tool): ToolSpec {
  return {
    name: tool.name,
    description: tool.description,
    input_schema: z.toJSONSchema(tool.inputSchema, { io: 'input', unrepresentable: 'any' }) as Record<
      string,
      unknown
    >,
  };
}

function textOf(content: readonly { type: string; text?: string }[]): string {
  return content
    .filter((b) => b.type === 'text')
    .map((b) => b.text ?? '')
    .join('');
}
