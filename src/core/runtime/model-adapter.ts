/**
 * The one interface every model provider sits behind. An adapter turns a provider's stream into
 * canonical chunks; the agent loop stamps them into streaming events (`message.start`, `text.delta`,
 * ..., `message.complete`), so every provider renders the same way (streaming spec §5.2).
 */

import { ERROR_CLASSES, type ErrorClass } from '../events/catalog/llm.js';

export { ERROR_CLASSES, type ErrorClass };

export type ContentBlock =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string | null }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error: boolean }
  | { type: 'image'; source: ImageSource };

/** An image of a user message, as a gateway client sent it (inline base64, or a URL the provider fetches). */
export type ImageSource =
  | { readonly kind: 'base64'; readonly media_type: string; readonly data: string }
  | { readonly kind: 'url'; readonly url: string };

export interface ConversationMessage {
  readonly role: 'user' | 'assistant' | 'tool';
  readonly content: readonly ContentBlock[];
}

export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly input_schema: Record<string, unknown>;
}

export interface ModelRequest {
  /** Canonical `provider:name`. */
  readonly model: string;
  readonly messages: readonly ConversationMessage[];
  readonly tools: readonly ToolSpec[];
  readonly system?: string;
  readonly maxTokens?: number;
  /** Sampling a gateway client asked for (its request's own fields); the provider's defaults without. */
  readonly temperature?: number;
  readonly topP?: number;
  readonly stopSequences?: readonly string[];
}

/** One piece of a provider's stream, already in canonical terms; `index` is the content block index. */
export type AdapterChunk =
  | { readonly kind: 'text'; readonly index: number; readonly text: string }
  | {
      readonly kind: 'thinking';
      readonly index: number;
      readonly text: string;
      readonly signature: string | null;
    }
  | { readonly kind: 'redacted_thinking'; readonly index: number; readonly data: string }
  | {
      readonly kind: 'tool_use_start';
      readonly index: number;
      readonly tool_use_id: string;
      readonly tool_name: string;
    }
  | {
      readonly kind: 'tool_input';
      readonly index: number;
      readonly tool_use_id: string;
      readonly partial_json: string;
    }
  | {
      readonly kind: 'tool_use_end';
      readonly index: number;
      readonly tool_use_id: string;
      readonly final_input: Record<string, unknown>;
    };

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export interface TokenUsage {
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly cached_input_tokens: number;
  readonly cache_creation_input_tokens: number;
}

/** What the adapter returns when its stream ended normally. */
export interface AdapterResult {
  readonly stop_reason: StopReason;
  readonly usage: TokenUsage;
  /** The provider's own id of the request (its `request-id` header), for its logs and support; null if none. */
  readonly provider_request_id: string | null;
}

export interface ModelAdapter {
  readonly provider: string;
  /**
   * Streams one model call. Yields chunks as they arrive and returns the stop reason and usage. When
   * `signal` aborts, the adapter stops reading (closing the provider connection) and throws an
   * AdapterError with class `cancelled`; the loop closes any open blocks (§6.2.1).
   */
  stream(request: ModelRequest, signal: AbortSignal): AsyncGenerator<AdapterChunk, AdapterResult, void>;
  /** Whether the model can serve a request at all (routing reports `rejected` otherwise). */
  validate?(model: string): ModelValidationFailure | null;
  /** Why `validate` refused, in words a user can act on (the variable to set, say), if it knows. */
  explain?(model: string): string | null;
}

export type ModelValidationFailure =
  | 'no_vision_support'
  | 'exceeds_context_window'
  | 'no_tool_support'
  | 'no_system_prompt_support'
  | 'no_structured_output_support'
  | 'provider_unavailable'
  | 'not_configured';

/** A failed model call, classified for `llm.call_failed` (bus spec §6.3). */
export class AdapterError extends Error {
  constructor(
    readonly errorClass: ErrorClass,
    message: string,
    readonly retryCount = 0,
    /** The provider's id of the request that failed, when its answer carried one. */
    readonly providerRequestId: string | null = null,
  ) {
    super(message);
    this.name = 'AdapterError';
  }
}

/** Rough token estimate (4 characters a token) for requests before the provider counts them. */
export function estimateTokens(messages: readonly ConversationMessage[]): number {
  let chars = 0;
  for (const message of messages) chars += JSON.stringify(message.content).length;
  return Math.max(1, Math.ceil(chars / 4));
}
