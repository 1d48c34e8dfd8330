import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { EventBus } from '../bus/event-bus.js';
import { newId } from '../events/ids.js';
import type { ClientToolDeclaration } from '../runtime/client-tools.js';
import {
  type AdapterChunk,
  type AdapterError,
  type ErrorClass,
  estimateTokens,
  type ModelAdapter,
} from '../runtime/model-adapter.js';
import { type CallResult, type CallTags, ModelCaller } from '../runtime/model-call.js';
import type { RouteDecision } from '../runtime/router.js';
import type { Runtime } from '../runtime/runtime.js';
import { ToolDispatcher } from '../runtime/tool-dispatcher.js';
import type { Tool } from '../runtime/tools/tool.js';
import { TurnEvents } from '../runtime/turn-events.js';
import { closeFailedTurn } from '../runtime/turn-failure.js';
import { cancelTurnState, type TurnState } from '../runtime/turn-state.js';
import { EarlyCall } from './early-call.js';
import { GatewayError } from './gateway-error.js';
import { type CallOutcome, type InboundRequest, lastUserText } from './inbound/inbound-request.js';

/** How long the session's and the turn's records wait for the provider's first chunk (early-call.ts). */
const BOOKKEEPING_WAIT_MS = 5;

/** What one gateway request asks of the runtime. */
export interface GatewayTurnRequest {
  readonly request: InboundRequest;
  readonly route: RouteDecision;
  readonly adapter: ModelAdapter;
  readonly workspacePath: string;
  /** The session's id, taken before it exists so the answer's headers can name it (`metis-session-id`). */
  readonly sessionId: string;
  readonly tags: CallTags;
  /** Aborts when the client goes away: the turn ends cancelled (`client_disconnect`). */
  readonly signal: AbortSignal;
  /** Each chunk as the provider streams it, before metis's own stream sees it. */
  readonly onChunk?: (chunk: AdapterChunk) => void;
}

export type GatewayTurnResult =
  | {
      readonly kind: 'completed';
      readonly outcome: CallOutcome;
      readonly costUsd: number;
      readonly sessionId: string;
      /** The call's `llm.call_completed` (null when lenient validation dropped it). */
      readonly eventId: string | null;
    }
  | { readonly kind: 'failed'; readonly error: GatewayError; readonly sessionId: string };

/**
 * Runs one gateway request as a metis session with one turn (docs/gateway.md "Sessions"): `session.created`, `turn.started`, `route.decided`, one model call with its
 * `llm.call_*` (stamped with the key) and streamed `message.*`, `turn.completed`, `session.ended`. The
 * tools offered are the client's alone, and they are not run: a call that asks for one ends the turn,
 * and the client gets the call back to run itself, as from the provider. metis's own tools, the
 * workspace memory and skills are not part of a gateway request: the client's system prompt is.
 */
export class GatewayTurns {
  private readonly caller: ModelCaller;

  constructor(
    private readonly runtime: Runtime,
    private readonly bus: EventBus,
    private readonly logger: Logger,
  ) {
    // A dispatcher with no tools of its own: a gateway call is offered the client's tools only.
    const dispatcher = new ToolDispatcher(
      [],
      runtime.config,
      runtime.sessions,
      runtime.confirmations,
      logger,
    );
    this.caller = new ModelCaller(runtime.config, dispatcher, runtime.sessions, logger);
  }

  async run(turn: GatewayTurnRequest): Promise<GatewayTurnResult> {
    const { request, route } = turn;
    const state: TurnState = { turnId: newId('turn'), controller: new AbortController(), cancelReason: null };
    const early = new EarlyCall(
      turn.adapter,
      {
        model: route.chosen_model,
        messages: request.messages,
        tools: request.tools.map((tool) => ({
          name: tool.name,
          description: tool.description,
          input_schema: tool.parameters,
        })),
        ...(request.system === null ? {} : { system: request.system }),
        ...request.sampling,
      },
      state.controller.signal,
      turn.onChunk,
    );
    await early.firstChunkOr(BOOKKEEPING_WAIT_MS);
    let session: ReturnType<Runtime['createSession']>;
    try {
      session = this.runtime.createSession({ workspacePath: turn.workspacePath, sessionId: turn.sessionId });
    } catch (error) {
      early.abandon();
      throw error;
    }
    const onAbort = () => cancelTurnState(state, 'client_disconnect');
    if (turn.signal.aborted) onAbort();
    else turn.signal.addEventListener('abort', onAbort, { once: true });
    const events = new TurnEvents(this.bus, this.runtime.streaming, session.id, state.turnId, false);
    const clientTools = request.tools.map(clientTool);
    const started = performance.now();
    const lastUser = lastUserText(request);
    try {
      const turnStarted = events.emit('turn.started', null, {
        user_message_hash: createHash('sha256').update(lastUser).digest('hex'),
        user_message_text_redacted: null,
        estimated_input_tokens: estimateTokens(request.messages),
        has_images: request.messages.some((m) => m.content.some((b) => b.type === 'image')),
        has_tool_calls_in_history: request.messages.some((m) => m.content.some((b) => b.type === 'tool_use')),
      });
      // What this request added: the messages after the model's last answer (a user message, or the
      // results of the calls it asked for). Earlier ones are the client's history, stored by the request
      // that sent them; storing them again would grow a long conversation quadratically. Their ids are
      // taken now, so they sort before the answer, and they are written once the call is done: a row
      // write commits what is queued, which is not to sit between the client and its first token.
      const input = newInput(request).map((message) => ({ id: newId('msg'), message }));
      const decided = events.emit('route.decided', turnStarted.id, {
        chosen_model: route.chosen_model,
        winner_index: route.winner_index,
        elapsed_ms: route.elapsed_ms,
        chain: route.chain,
      });
      const call = await this.caller.call(early.adapter, route.chosen_model, request.messages, decided.id, {
        events,
        state,
        isWorker: false,
        excludedTools: undefined,
        clientTools,
        systemPrompt: async () => request.system,
        callTags: turn.tags,
      });
      for (const { id, message } of input)
        this.runtime.sessions.saveMessage(
          {
            id,
            session_id: session.id,
            turn_id: state.turnId,
            role: message.role,
            content: message.content as unknown[],
            status: 'complete',
            model: null,
            usage: null,
          },
          turnStarted.id,
        );
      this.endTurn(events, turnStarted.id, state, call, started);
      if (call.kind !== 'completed')
        return { kind: 'failed', error: errorOf(call.kind, early.failure()), sessionId: session.id };
      return {
        kind: 'completed',
        costUsd: call.costUsd,
        eventId: call.completedEventId,
        sessionId: session.id,
        outcome: {
          model: route.chosen_model,
          content: call.content,
          stopReason: call.stopReason,
          usage: call.usage,
        },
      };
    } catch (error) {
      // Whatever failed (a write refused, an event strict validation rejects) closes the turn with its
      // terminal events, as the agent loop's failures are (turn-failure.ts).
      closeFailedTurn(events, state, this.runtime.sessions, this.runtime.config, this.logger, error, started);
      return { kind: 'failed', error: new GatewayError('internal', 'internal error'), sessionId: session.id };
    } finally {
      early.abandon();
      turn.signal.removeEventListener('abort', onAbort);
      try {
        this.runtime.endSession(session.id, 'completed');
      } catch (error) {
        this.logger.warn({ err: error, session_id: session.id }, 'could not end a gateway session');
      }
    }
  }

  private endTurn(
    events: TurnEvents,
    turnStartedId: string | null,
    state: TurnState,
    call: CallResult,
    started: number,
  ): void {
    state.ending = true;
    if (call.kind === 'cancelled') {
      events.emit('turn.cancelled', turnStartedId, {
        reason: state.cancelReason ?? 'client_disconnect',
        partial_llm_calls: 1,
        partial_tool_calls: 0,
      });
      return;
    }
    events.emit('turn.completed', turnStartedId, {
      stop_reason: call.kind === 'completed' ? call.stopReason : 'end_turn',
      llm_call_count: 1,
      tool_call_count: 0,
      total_input_tokens: call.usage.input_tokens,
      total_output_tokens: call.usage.output_tokens,
      total_cost_usd: call.costUsd,
      wall_time_seconds: (performance.now() - started) / 1000,
    });
  }
}

/** A model call that did not complete, as the client's error. */
function errorOf(kind: 'cancelled' | 'failed' | 'redirected', failure: AdapterError | null): GatewayError {
  if (kind !== 'failed') return new GatewayError('internal', 'the request was cancelled');
  const errorClass: ErrorClass = failure?.errorClass ?? 'other';
  const said = `the model call failed (${errorClass})`;
  switch (errorClass) {
    case 'rate_limit':
      return new GatewayError('rate_limit', `${said}: the provider is rate limiting metis`, {
        retryAfterSeconds: 1,
      });
    case 'context_overflow':
    case 'invalid_request':
      return new GatewayError('invalid_request', `${said}: the provider refused the request`);
    case 'server_error':
      return new GatewayError('overloaded', `${said}: the provider is failing`);
    default:
      return new GatewayError('upstream', said);
  }
}

/** A client tool as the model call offers it; the gateway never runs it (the call ends the turn). */
function clientTool(declaration: ClientToolDeclaration): Tool {
  return {
    name: declaration.name,
    description: declaration.description,
    inputSchema: z.record(z.string(), z.unknown()),
    inputJsonSchema: declaration.parameters,
    sideEffects: 'none',
    execute: () => Promise.reject(new Error('a gateway client runs its own tools')),
  };
}

function newInput(request: InboundRequest): InboundRequest['messages'] {
  const lastAnswer = request.messages.findLastIndex((message) => message.role === 'assistant');
  return request.messages.slice(lastAnswer + 1);
}
