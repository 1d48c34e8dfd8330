import Anthropic, { APIConnectionError, APIError, APIUserAbortError } from '@anthropic-ai/sdk';
import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ConversationMessage,
  type ModelAdapter,
  type ModelRequest,
  type ModelValidationFailure,
  type StopReason,
  type ToolSpec,
} from '../model-adapter.js';
import { explainRefusal, type ProviderWhereabouts } from './adapter-advice.js';
import { apiModelName, pairToolCalls, parseToolInput } from './conversation.js';
import { type SdkErrors, StreamIncompleteError } from './error-mapping.js';
import { adapterRetryPolicy, streamProviderCall } from './provider-call.js';
import type { RetryPolicy } from './retry.js';

const SDK_ERRORS: SdkErrors = { APIError, APIUserAbortError, APIConnectionError };

/** Placeholder handed to the SDK when no key is configured; `validate()` keeps such a provider unused. */
const NO_KEY = 'metis-no-key-configured';

export interface AnthropicAdapterOptions {
  /** Provider name, the part before the colon of `provider:model`. */
  readonly provider: string;
  readonly apiKey: string | null;
  readonly baseUrl?: string;
  /** Where the key comes from, named in refusals and auth failures (`$ANTHROPIC_API_KEY`). */
  readonly keySource?: string | null;
  readonly maxRetries?: number;
  /** `max_tokens` when the request gives none. */
  readonly maxTokens?: number;
  /** Enables extended thinking with this budget. */
  readonly thinkingBudgetTokens?: number;
  /** Backoff timings; tests shorten them. */
  readonly retryPolicy?: Partial<RetryPolicy>;
}

type OpenBlock =
  | { readonly kind: 'text' | 'thinking' | 'redacted_thinking'; readonly index: number }
  | {
      readonly kind: 'tool_use';
      readonly index: number;
      readonly id: string;
      json: string;
      readonly startInput: Record<string, unknown>;
    };

/**
 * `anthropic:<model>` through `@anthropic-ai/sdk` (streaming spec §5.2). The SDK's raw stream events
 * become canonical chunks:
 *
 *   content_block_start text / thinking      → (their initial text, if any)
 *   content_block_start redacted_thinking    → redacted_thinking
 *   content_block_start tool_use             → tool_use_start
 *   text_delta / thinking_delta              → text / thinking (signature null)
 *   signature_delta                          → thinking with empty text and the signature, so the
 *                                              signature rides on the last thinking delta of the block
 *                                              without holding any text back
 *   input_json_delta                         → tool_input
 *   content_block_stop of a tool_use         → tool_use_end with the parsed input ({} if it does not parse)
 *   message_delta                            → stop_reason and cumulative usage
 *   message_stop                             → end; a stream that ends without it failed (network)
 *
 * Block indexes are renumbered densely over the blocks metis knows (server-tool blocks are skipped).
 * The SDK retries nothing (maxRetries 0): `streamWithRetries` retries before the first chunk only.
 */
export class AnthropicAdapter implements ModelAdapter {
  readonly provider: string;
  private readonly client: Anthropic;
  private readonly apiKey: string | null;
  private readonly keySource: string | null;
  private readonly maxTokens: number;
  private readonly thinkingBudgetTokens: number | undefined;
  private readonly policy: RetryPolicy;

  constructor(options: AnthropicAdapterOptions) {
    this.provider = options.provider;
    this.apiKey = options.apiKey;
    this.keySource = options.keySource ?? null;
    this.thinkingBudgetTokens = options.thinkingBudgetTokens;
    const maxTokens = options.maxTokens ?? 8192;
    this.maxTokens =
      this.thinkingBudgetTokens !== undefined
        ? Math.max(maxTokens, this.thinkingBudgetTokens + 1024)
        : maxTokens;
    this.policy = adapterRetryPolicy(options);
    this.client = new Anthropic({
      apiKey: options.apiKey ?? NO_KEY,
      ...(options.baseUrl !== undefined ? { baseURL: options.baseUrl } : {}),
      maxRetries: 0,
      openTelemetry: false,
    });
  }

  validate(model: string): ModelValidationFailure | null {
    if (this.apiKey === null || apiModelName(model) === '') return 'not_configured';
    return null;
  }

  explain(model: string): string | null {
    return explainRefusal(model, this.apiKey === null, this.whereabouts());
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

  /** One HTTP call: the raw SSE events of the Messages API, translated. */
  private async *attempt(
    request: ModelRequest,
    signal: AbortSignal,
  ): AsyncGenerator<AdapterChunk, AdapterResult, void> {
    const budget = this.thinkingBudgetTokens;
    // With thinking on, the API wants max_tokens above the budget: a client's cap is raised as the
    // configured one is (constructor). The Messages API takes no temperature or top_p (not in the SDK's
    // parameters): a gateway client's are not sent here.
    const maxTokens =
      request.maxTokens === undefined
        ? this.maxTokens
        : budget === undefined
          ? request.maxTokens
          : Math.max(request.maxTokens, budget + 1024);
    const params: Anthropic.MessageCreateParamsStreaming = {
      model: apiModelName(request.model),
      max_tokens: maxTokens,
      messages: toAnthropicMessages(request.messages),
      stream: true,
      ...(request.system ? { system: request.system } : {}),
      ...(request.tools.length > 0 ? { tools: request.tools.map(toAnthropicTool) } : {}),
      ...(budget !== undefined ? { thinking: { type: 'enabled', budget_tokens: budget } } : {}),
      ...(request.stopSequences !== undefined ? { stop_sequences: [...request.stopSequences] } : {}),
    };
    const { data: stream, request_id: requestId } = await this.client.messages
      .create(params, { signal })
      .withResponse();

    const blocks = new Map<number, OpenBlock>();
    let nextIndex = 0;
    let stopReason: StopReason = 'end_turn';
    let stopped = false;
    const usage = {
      input_tokens: 0,
      output_tokens: 0,
      cached_input_tokens: 0,
      cache_creation_input_tokens: 0,
    };
    const takeUsage = (u: {
      input_tokens?: number | null;
      output_tokens?: number | null;
      cache_read_input_tokens?: number | null;
      cache_creation_input_tokens?: number | null;
    }) => {
      // message_start carries the input side; message_delta carries cumulative counts (nulls = unchanged).
      if (typeof u.input_tokens === 'number') usage.input_tokens = u.input_tokens;
      if (typeof u.output_tokens === 'number') usage.output_tokens = u.output_tokens;
      if (typeof u.cache_read_input_tokens === 'number')
        usage.cached_input_tokens = u.cache_read_input_tokens;
      if (typeof u.cache_creation_input_tokens === 'number') {
        usage.cache_creation_input_tokens = u.cache_creation_input_tokens;
      }
    };

    for await (const event of stream) {
      switch (event.type) {
        case 'message_start':
          takeUsage(event.message.usage);
          break;
        case 'content_block_start': {
          const block = event.content_block;
          switch (block.type) {
            case 'text': {
              const index = nextIndex++;
              blocks.set(event.index, { kind: 'text', index });
              if (block.text) yield { kind: 'text', index, text: block.text };
              break;
            }
            case 'thinking': {
              const index = nextIndex++;
              blocks.set(event.index, { kind: 'thinking', index });
              if (block.thinking || block.signature) {
                yield { kind: 'thinking', index, text: block.thinking, signature: block.signature || null };
              }
              break;
            }
            case 'redacted_thinking': {
              const index = nextIndex++;
              blocks.set(event.index, { kind: 'redacted_thinking', index });
              yield { kind: 'redacted_thinking', index, data: block.data };
              break;
            }
            case 'tool_use': {
              const index = nextIndex++;
              const startInput = isRecord(block.input) ? block.input : {};
              blocks.set(event.index, { kind: 'tool_use', index, id: block.id, json: '', startInput });
              yield { kind: 'tool_use_start', index, tool_use_id: block.id, tool_name: block.name };
              break;
            }
            default:
              break; // server tools, citations-only blocks: not part of the canonical message
          }
          break;
        }
        case 'content_block_delta': {
          const open = blocks.get(event.index);
          if (!open) break;
          const delta = event.delta;
          if (delta.type === 'text_delta' && open.kind === 'text' && delta.text) {
            yield { kind: 'text', index: open.index, text: delta.text };
          } else if (delta.type === 'thinking_delta' && open.kind === 'thinking' && delta.thinking) {
            yield { kind: 'thinking', index: open.index, text: delta.thinking, signature: null };
          } else if (delta.type === 'signature_delta' && open.kind === 'thinking') {
            yield { kind: 'thinking', index: open.index, text: '', signature: delta.signature };
          } else if (delta.type === 'input_json_delta' && open.kind === 'tool_use' && delta.partial_json) {
            open.json += delta.partial_json;
            yield {
              kind: 'tool_input',
              index: open.index,
              tool_use_id: open.id,
              partial_json: delta.partial_json,
            };
          }
          break;
        }
        case 'content_block_stop': {
          const open = blocks.get(event.index);
          if (open?.kind === 'tool_use') {
            const finalInput = open.json.trim() === '' ? open.startInput : parseToolInput(open.json);
            yield { kind: 'tool_use_end', index: open.index, tool_use_id: open.id, final_input: finalInput };
          }
          blocks.delete(event.index);
          break;
        }
        case 'message_delta':
          if (event.delta.stop_reason) stopReason = stopReasonOf(event.delta.stop_reason);
          takeUsage(event.usage);
          break;
        case 'message_stop':
          stopped = true;
          break;
      }
    }
    // The SDK ends the iteration quietly when the request is aborted.
    if (signal.aborted) throw new AdapterError('cancelled', 'the request was cancelled');
    if (!stopped) throw new StreamIncompleteError('the stream ended before message_stop');
    return { stop_reason: stopReason, usage, provider_request_id: requestId ?? null };
  }
}

/**
 * Anthropic stop reasons in canonical terms: `pause_turn` and `refusal` end the turn,
 * `model_context_window_exceeded` is a max-tokens stop.
 */
function stopReasonOf(reason: string): StopReason {
  switch (reason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'max_tokens';
    case 'stop_sequence':
      return 'stop_sequence';
    case 'tool_use':
      return 'tool_use';
    default:
      return 'end_turn';
  }
}

/**
 * Canonical history → Messages API: `tool` messages become `user` messages of `tool_result` blocks
 * (merged with a following user message, results first), empty text blocks and unsigned thinking are
 * dropped (the API rejects them), every tool call is paired with a result.
 */
export function toAnthropicMessages(messages: readonly ConversationMessage[]): Anthropic.MessageParam[] {
  const out: Anthropic.MessageParam[] = [];
  for (const message of pairToolCalls(messages)) {
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    const content: Anthropic.ContentBlockParam[] = [];
    for (const block of message.content) {
      switch (block.type) {
        case 'text':
          if (block.text !== '') content.push({ type: 'text', text: block.text });
          break;
        case 'thinking':
          if (role === 'assistant' && block.signature) {
            content.push({ type: 'thinking', thinking: block.thinking, signature: block.signature });
          }
          break;
        case 'redacted_thinking':
          if (role === 'assistant') content.push({ type: 'redacted_thinking', data: block.data });
          break;
        case 'tool_use':
          if (role === 'assistant') {
            content.push({ type: 'tool_use', id: block.id, name: block.name, input: block.input });
          }
          break;
        case 'image':
          if (role === 'user')
            content.push({
              type: 'image',
              source:
                block.source.kind === 'url'
                  ? { type: 'url', url: block.source.url }
                  : {
                      type: 'base64',
                      media_type: block.source.media_type as Anthropic.Base64ImageSource['media_type'],
                      data: block.source.data,
                    },
            });
          break;
        case 'tool_result':
          content.push({
            type: 'tool_result',
            tool_use_id: block.tool_use_id,
            content: block.content,
            ...(block.is_error ? { is_error: true } : {}),
          });
          break;
      }
    }
    if (content.length === 0) continue;
    const previous = out[out.length - 1];
    if (previous && previous.role === role && Array.isArray(previous.content)) {
      previous.content.push(...content);
    } else {
      out.push({ role, content });
    }
  }
  return out;
}

function toAnthropicTool(tool: ToolSpec): Anthropic.Tool {
  const { $schema: _schema, ...schema } = tool.input_schema;
  return {
    name: tool.name,
    description: tool.description,
    input_schema: { ...schema, type: 'object' } as Anthropic.Tool.InputSchema,
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
