import OpenAI, { APIConnectionError, APIError, APIUserAbortError } from 'openai';
import { newId } from '../../events/ids.js';
import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ConversationMessage,
  type ImageSource,
  type ModelAdapter,
  type ModelRequest,
  type ModelValidationFailure,
  type StopReason,
  type ToolSpec,
} from '../model-adapter.js';
import { explainRefusal, type ProviderWhereabouts } from './adapter-advice.js';
import { apiModelName, pairToolCalls, parseToolInput } from './conversation.js';
import { type SdkErrors, StreamIncompleteError } from './error-mapping.js';
import { openChatStream } from './openai-stream.js';
import { adapterRetryPolicy, streamProviderCall } from './provider-call.js';
import type { RetryPolicy } from './retry.js';

const SDK_ERRORS: SdkErrors = { APIError, APIUserAbortError, APIConnectionError };

/** Key sent to servers that need none (Ollama, llama.cpp, vLLM without --api-key). */
export const PLACEHOLDER_KEY = 'metis-no-key';

export interface OpenAIAdapterOptions {
  /** Provider name, the part before the colon of `provider:model`. */
  readonly provider: string;
  /** The key; `null` when none is configured. */
  readonly apiKey: string | null;
  /** Whether the provider is unusable without a key (`validate()` then says `not_configured`). */
  readonly requiresKey: boolean;
  readonly baseUrl?: string;
  /** Where the key comes from, named in refusals and auth failures (`$ANTHROPIC_API_KEY`). */
  readonly keySource?: string | null;
  readonly maxRetries?: number;
  /** `max_tokens` sent when the request gives one or this is set; else the server's default. */
  readonly maxTokens?: number;
  /** Read OPENAI_ORG_ID / OPENAI_PROJECT_ID from the environment (the official API only). */
  readonly organizationFromEnv?: boolean;
  readonly retryPolicy?: Partial<RetryPolicy>;
}

interface ToolCallState {
  /** Canonical block index, set when the call starts (its name is known). */
  index: number | null;
  id: string | null;
  name: string | null;
  /** Argument fragments that arrived before the call could start. */
  pending: string;
  json: string;
  ended: boolean;
}

/**
 * `openai:<model>` and every `openai-compatible` provider (Ollama, vLLM, llama.cpp server) through
 * streaming chat completions, with `stream_options.include_usage`; the `openai` SDK's client holds the
 * base URL and key and its types and error classes are used, but the request is openai-stream.ts's:
 *
 *   delta.content                        → text (one text block)
 *   delta.reasoning_content / reasoning  → thinking without a signature (servers of reasoning models)
 *   delta.tool_calls[i] first with name  → tool_use_start (calls keyed by their `index`; several per message)
 *   delta.tool_calls[i].function.arguments → tool_input
 *   finish_reason                        → tool_use_end for every call, then the stop reason:
 *                                          stop→end_turn, length→max_tokens, tool_calls→tool_use
 *                                          (also `stop` when calls were made: some servers say so)
 *   the usage chunk (empty choices)      → usage: input = prompt_tokens − cached_tokens, so that
 *                                          input and cached input are disjoint, as with Anthropic
 *
 * A stream that ends without a finish_reason failed (network). Only choice 0 is read.
 */
export class OpenAIAdapter implements ModelAdapter {
  readonly provider: string;
  private readonly client: OpenAI;
  private readonly apiKey: string | null;
  private readonly keySource: string | null;
  private readonly requiresKey: boolean;
  private readonly maxTokens: number | undefined;
  private readonly policy: RetryPolicy;

  constructor(options: OpenAIAdapterOptions) {
    this.provider = options.provider;
    this.apiKey = options.apiKey;
    this.keySource = options.keySource ?? null;
    this.requiresKey = options.requiresKey;
    this.maxTokens = options.maxTokens;
    this.policy = adapterRetryPolicy(options);
    this.client = new OpenAI({
      apiKey: options.apiKey ?? PLACEHOLDER_KEY,
      ...(options.baseUrl !== undefined ? { baseURL: options.baseUrl } : {}),
      ...(options.organizationFromEnv ? {} : { organization: null, project: null }),
      maxRetries: 0,
    });
  }

  validate(model: string): ModelValidationFailure | null {
    if ((this.requiresKey && this.apiKey === null) || apiModelName(model) === '') return 'not_configured';
    return null;
  }

  explain(model: string): string | null {
    return explainRefusal(model, this.requiresKey && this.apiKey === null, this.whereabouts());
  }

  private whereabouts(): ProviderWhereabouts {
    return { keySource: this.keySource, baseUrl: this.client.baseURL };
  }

  stream(request: ModelRequest, signal: AbortSignal): AsyncGenerator<AdapterChunk, AdapterResult, void> {
    return streamProviderCall({
      provider: this.provider,
      sdk: SDK_ERRORS,
      policy: this.policy,
      apiKey: this.apiKey,
      whereabouts: () => this.whereabouts(),
      signal,
      attempt: () => this.attempt(request, signal),
    });
  }

  private async *attempt(
    request: ModelRequest,
    signal: AbortSignal,
  ): AsyncGenerator<AdapterChunk, AdapterResult, void> {
    const maxTokens = request.maxTokens ?? this.maxTokens;
    const params: OpenAI.ChatCompletionCreateParamsStreaming = {
      model: apiModelName(request.model),
      messages: toOpenAIMessages(request.messages, request.system),
      stream: true,
      stream_options: { include_usage: true },
      ...(request.tools.length > 0 ? { tools: request.tools.map(toOpenAITool) } : {}),
      ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      ...(request.topP !== undefined ? { top_p: request.topP } : {}),
      ...(request.stopSequences !== undefined ? { stop: [...request.stopSequences] } : {}),
    };
    const { chunks: stream, requestId } = await openChatStream({ client: this.client, params, signal });

    let nextIndex = 0;
    let textIndex: number | null = null;
    let thinkingIndex: number | null = null;
    let finishReason: string | null = null;
    const calls = new Map<number, ToolCallState>();
    const usage = {
      input_tokens: 0,
      output_tokens: 0,
      cached_input_tokens: 0,
      cache_creation_input_tokens: 0,
    };

    for await (const chunk of stream) {
      if (chunk.usage) {
        const cached = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
        usage.input_tokens = Math.max(0, (chunk.usage.prompt_tokens ?? 0) - cached);
        usage.output_tokens = chunk.usage.completion_tokens ?? 0;
        usage.cached_input_tokens = cached;
      }
      const choice = chunk.choices?.find((c) => c.index === 0) ?? chunk.choices?.[0];
      if (!choice) continue;
      const delta = (choice.delta ?? {}) as OpenAI.ChatCompletionChunk.Choice.Delta & {
        reasoning_content?: string | null;
        reasoning?: string | null;
      };
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string' && reasoning !== '') {
        thinkingIndex ??= nextIndex++;
        yield { kind: 'thinking', index: thinkingIndex, text: reasoning, signature: null };
      }
      if (typeof delta.content === 'string' && delta.content !== '') {
        textIndex ??= nextIndex++;
        yield { kind: 'text', index: textIndex, text: delta.content };
      }
      for (const call of delta.tool_calls ?? []) {
        let state = calls.get(call.index);
        if (!state) {
          state = { index: null, id: null, name: null, pending: '', json: '', ended: false };
          calls.set(call.index, state);
        }
        if (call.id) state.id ??= call.id;
        if (call.function?.name) state.name ??= call.function.name;
        const fragment = call.function?.arguments ?? '';
        if (state.index === null) {
          state.pending += fragment;
          if (state.name === null) continue;
          state.index = nextIndex++;
          state.id ??= `call_${newId('tu')}`;
          yield { kind: 'tool_use_start', index: state.index, tool_use_id: state.id, tool_name: state.name };
          if (state.pending !== '') {
            state.json = state.pending;
            yield {
              kind: 'tool_input',
              index: state.index,
              tool_use_id: state.id,
              partial_json: state.pending,
            };
          }
          continue;
        }
        if (fragment !== '') {
          state.json += fragment;
          yield { kind: 'tool_input', index: state.index, tool_use_id: state.id!, partial_json: fragment };
        }
      }
      if (choice.finish_reason) {
        finishReason = choice.finish_reason;
        for (const state of [...calls.values()].sort((a, b) => (a.index ?? 0) - (b.index ?? 0))) {
          if (state.index === null || state.ended) continue;
          state.ended = true;
          yield {
            kind: 'tool_use_end',
            index: state.index,
            tool_use_id: state.id!,
            final_input: parseToolInput(state.json),
          };
        }
      }
    }
    // The stream ends quietly when the request is aborted (as the SDK's did).
    if (signal.aborted) throw new AdapterError('cancelled', 'the request was cancelled');
    if (finishReason === null) throw new StreamIncompleteError('the stream ended before a finish_reason');
    const madeCalls = [...calls.values()].some((c) => c.ended);
    return {
      stop_reason: stopReasonOf(finishReason, madeCalls),
      usage,
      provider_request_id: requestId ?? null,
    };
  }
}

function stopReasonOf(finishReason: string, madeCalls: boolean): StopReason {
  if (finishReason === 'length') return 'max_tokens';
  if (finishReason === 'tool_calls' || finishReason === 'function_call' || madeCalls) return 'tool_use';
  // stop, content_filter and unknown reasons end the turn.
  return 'end_turn';
}

/**
 * Canonical history → chat messages: the system prompt first, user text, assistant text plus
 * `tool_calls`, and one `tool` message per result (errors prefixed "Error: ", the API has no flag).
 * Thinking is not sent back (chat completions take none).
 */
export function toOpenAIMessages(
  messages: readonly ConversationMessage[],
  system?: string,
): OpenAI.ChatCompletionMessageParam[] {
  const out: OpenAI.ChatCompletionMessageParam[] = [];
  if (system) out.push({ role: 'system', content: system });
  for (const message of pairToolCalls(messages)) {
    const joined = message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    const text = joined.trim() === '' ? '' : joined;
    if (message.role === 'user') {
      const images = message.content.flatMap((b) => (b.type === 'image' ? [imagePart(b.source)] : []));
      if (images.length > 0)
        out.push({
          role: 'user',
          content: [...(text === '' ? [] : [{ type: 'text' as const, text }]), ...images],
        });
      else if (text !== '') out.push({ role: 'user', content: text });
    } else if (message.role === 'assistant') {
      const toolCalls = message.content.flatMap((b) =>
        b.type === 'tool_use'
          ? [
              {
                id: b.id,
                type: 'function' as const,
                function: { name: b.name, arguments: JSON.stringify(b.input) },
              },
            ]
          : [],
      );
      if (text === '' && toolCalls.length === 0) continue;
      out.push({
        role: 'assistant',
        content: text === '' ? null : text,
        ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
      });
    } else {
      for (const block of message.content) {
        if (block.type !== 'tool_result') continue;
        out.push({
          role: 'tool',
          tool_call_id: block.tool_use_id,
          content: block.is_error ? `Error: ${block.content}` : block.content,
        });
      }
    }
  }
  return out;
}

/** A gateway client's image as a chat content part: a URL, or the inline image as a data URL. */
function imagePart(source: ImageSource): OpenAI.ChatCompletionContentPartImage {
  const url = source.kind === 'url' ? source.url : `data:${source.media_type};base64,${source.data}`;
  return { type: 'image_url', image_url: { url } };
}

function toOpenAITool(tool: ToolSpec): OpenAI.ChatCompletionTool {
  const { $schema: _schema, ...parameters } = tool.input_schema;
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters },
  };
}
