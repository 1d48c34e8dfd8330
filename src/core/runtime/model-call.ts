import type { Logger } from 'pino';
import { z } from 'zod';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import { newId } from '../events/ids.js';
import type { SessionRows } from '../store/store-port.js';
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
import { costOf } from './pricing.js';
import type { ToolDispatcher } from './tool-dispatcher.js';
import type { Tool } from './tools/tool.js';
import type { TurnEvents } from './turn-events.js';
import { redact } from './turn-failure.js';
import type { TurnState } from './turn-state.js';

/** The turn a model call belongs to, as far as the call needs it. */
export interface CallingTurn {
  readonly events: TurnEvents;
  readonly state: TurnState;
  readonly isWorker: boolean;
  /** Tools the model is not offered. */
  readonly excludedTools: ReadonlySet<string> | undefined;
  /** The client's own tools for this turn (AG-UI frontend tools), offered beside metis's. */
  readonly clientTools?: readonly Tool[];
  /** The system prompt of each call (the workspace memory), read just before it; null: none. */
  readonly systemPrompt?: () => Promise<string | null>;
  /** Who the call is for, stamped on `llm.call_completed` (a gateway request's key; bus §6.3). */
  readonly callTags?: CallTags;
}

/** The additive identity fields of `llm.call_completed` (bus §6.3; null on agent-loop traffic). */
export interface CallTags {
  readonly gateway_key_id: string | null;
  readonly inbound_shape: 'openai' | 'anthropic' | null;
  readonly user_id: string | null;
  readonly team_id: string | null;
}

export type CallResult =
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
 * One model call of a turn: `llm.call_started`, the streamed message, then `llm.call_completed` or
 * `llm.call_failed`, with the assistant message stored as it ended. A call cut short (the turn
 * cancelled, an override) or failed first closes what the client has open (§6.2.1).
 */
export class ModelCaller {
  constructor(
    private readonly config: RuntimeConfig,
    private readonly dispatcher: ToolDispatcher,
    private readonly sessions: SessionRows,
    private readonly logger: Logger,
  ) {}

  async call(
    adapter: ModelAdapter,
    model: string,
    conversation: readonly ConversationMessage[],
    parent: string | null,
    turn: CallingTurn,
  ): Promise<CallResult> {
    const { events, state } = turn;
    const signal = state.controller.signal;
    const provider = adapter.provider;
    const callAbort = new AbortController();
    state.callAbort = callAbort;
    const callSignal = AbortSignal.any([signal, callAbort.signal]);
    const system = (await turn.systemPrompt?.()) ?? null;
    const started = performance.now();
    const callStarted = events.emit('llm.call_started', parent, {
      model,
      provider,
      estimated_input_tokens: estimateTokens(conversation),
      request_id: newId('req'),
      is_worker: turn.isWorker,
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
          tools: this.dispatcher.available(turn.excludedTools, turn.clientTools).map(toolSpecOf),
          ...(system === null ? {} : { system }),
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
      this.saveAssistant(turn, messageId, content, cutShort ? 'cancelled' : 'error', model, usage, cut.id);
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
    this.saveAssistant(turn, messageId, content, 'complete', model, usage, complete.id);
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
      ...turn.callTags,
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

  private saveAssistant(
    turn: CallingTurn,
    messageId: string,
    content: unknown[],
    status: 'complete' | 'cancelled' | 'error',
    model: string,
    usage: Record<string, unknown>,
    completeEventId: string,
  ): void {
    // Handed over (turn-drain.ts): the call is issued again at the next start; its message is not kept.
    if (turn.events.frozen) return;
    this.sessions.saveMessage(
      {
        id: messageId,
        session_id: turn.events.sessionId,
        turn_id: turn.state.turnId,
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
    input_schema:
      tool.inputJsonSchema ??
      (z.toJSONSchema(tool.inputSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>),
  };
}

function textOf(content: readonly { type: string; text?: string }[]): string {
  return content
    .filter((b) => b.type === 'text')
    .map((b) => b.text ?? '')
    .join('');
}
