import type { ClientToolDeclaration } from '../../runtime/client-tools.js';
import type {
  AdapterChunk,
  ContentBlock,
  ConversationMessage,
  ModelRequest,
  StopReason,
  TokenUsage,
} from '../../runtime/model-adapter.js';
import { GatewayError } from '../gateway-error.js';

/** Which provider's API a request came in as (`llm.call_completed.inbound_shape`). */
export type InboundShape = 'openai' | 'anthropic';

/** Which of the three inbound routes. */
export type InboundApi = 'chat_completions' | 'responses' | 'messages';

/** A provider-shaped request in metis's terms: what the model is asked, with the client's own tools. */
export interface InboundRequest {
  readonly api: InboundApi;
  /** The model the client named, as it named it. */
  readonly model: string;
  readonly system: string | null;
  readonly messages: ConversationMessage[];
  readonly tools: ClientToolDeclaration[];
  readonly stream: boolean;
  /** OpenAI chat's `stream_options.include_usage`: a last chunk with the usage. */
  readonly includeUsage: boolean;
  /** The client's output cap and sampling, passed to the provider call as they were asked. */
  readonly sampling: Sampling;
}

export type Sampling = Pick<ModelRequest, 'maxTokens' | 'temperature' | 'topP' | 'stopSequences'>;

/**
 * The output cap and sampling fields of a request, each where its provider puts it: the first of
 * `maxTokens` that is set (OpenAI chat's `max_completion_tokens` replaced `max_tokens`), `temperature`,
 * `top_p`, and `stop` (a string or a list). A field of the wrong type is a 400 naming it; the ranges
 * are the provider's to check, since they differ (temperature up to 2 at OpenAI, 1 at Anthropic).
 */
export function samplingOf(
  body: Record<string, unknown>,
  fields: { readonly maxTokens: readonly string[]; readonly stop: string | null },
): Sampling {
  const sampling: { -readonly [K in keyof Sampling]: Sampling[K] } = {};
  for (const field of fields.maxTokens) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
      throw invalid(field, 'must be a positive integer');
    sampling.maxTokens = value;
    break;
  }
  const number = (field: string): number | undefined => {
    const value = body[field];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
      throw invalid(field, 'must be a number, 0 or more');
    return value;
  };
  const temperature = number('temperature');
  if (temperature !== undefined) sampling.temperature = temperature;
  const topP = number('top_p');
  if (topP !== undefined) sampling.topP = topP;
  const stop = fields.stop === null ? undefined : body[fields.stop];
  if (stop !== undefined && stop !== null) {
    const list = typeof stop === 'string' ? [stop] : stop;
    if (!Array.isArray(list) || !list.every((s) => typeof s === 'string'))
      throw invalid(fields.stop!, 'must be a string or a list of strings');
    if (list.length > 0) sampling.stopSequences = list;
  }
  return sampling;
}

/** What the model answered, for a plain (not streamed) answer and a stream's last frames. */
export interface CallOutcome {
  readonly model: string;
  readonly content: readonly ContentBlock[];
  readonly stopReason: StopReason;
  readonly usage: TokenUsage;
}

/**
 * One inbound route's wire format: the request's translation, the plain answer, and a stream's frames
 * (already SSE-encoded text), made fresh per request.
 */
export interface InboundFormat {
  readonly shape: InboundShape;
  readonly api: InboundApi;
  parse(body: unknown): InboundRequest;
  answer(outcome: CallOutcome, id: string): unknown;
  stream(model: string, id: string, includeUsage: boolean): StreamEncoder;
}

export interface StreamEncoder {
  /** The frames before the first chunk (`message_start`, `response.created`, a role chunk). */
  open(): string;
  chunk(chunk: AdapterChunk): string;
  close(outcome: CallOutcome): string;
  /** A failure after the stream began: an error frame in the provider's own form. */
  fail(error: GatewayError): string;
}

/** One SSE frame; `event` only where the provider names its events (Anthropic, Responses). */
export function sseFrame(data: unknown, event?: string): string {
  const json = typeof data === 'string' ? data : JSON.stringify(data);
  return event === undefined ? `data: ${json}\n\n` : `event: ${event}\ndata: ${json}\n\n`;
}

/** A field of a request that is not what it should be: the 400 names it. */
export function invalid(param: string, message: string): GatewayError {
  return new GatewayError('invalid_request', `${param}: ${message}`, { param });
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A tool's input given as a JSON text (OpenAI's `arguments`); a text that is not an object is a 400. */
export function parseArguments(param: string, text: unknown): Record<string, unknown> {
  if (typeof text !== 'string') throw invalid(param, 'must be a string of JSON');
  if (text.trim() === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalid(param, 'is not valid JSON');
  }
  if (!isRecord(value)) throw invalid(param, 'must be a JSON object');
  return value;
}

/** A tool result's content: text, or the text parts of a list (other parts are not passed on). */
export function textOfParts(param: string, content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalid(param, 'must be a string or a list of parts');
  return content
    .map((part, i) => {
      if (!isRecord(part)) throw invalid(`${param}[${i}]`, 'must be an object');
      return typeof part.text === 'string' ? part.text : '';
    })
    .join('');
}

/** Appends a tool result to the conversation: consecutive results share one `tool` message. */
export function pushToolResult(messages: ConversationMessage[], block: ContentBlock): void {
  const last = messages.at(-1);
  if (last?.role === 'tool') (last.content as ContentBlock[]).push(block);
  else messages.push({ role: 'tool', content: [block] });
}

/** The text blocks of an answer, joined. */
export function answerText(content: readonly ContentBlock[]): string {
  return content.map((b) => (b.type === 'text' ? b.text : '')).join('');
}

export function requireModel(body: Record<string, unknown>): string {
  if (typeof body.model !== 'string' || body.model.trim() === '') throw invalid('model', 'is required');
  return body.model;
}

export function requireObject(body: unknown): Record<string, unknown> {
  if (!isRecord(body)) throw invalid('body', 'must be a JSON object');
  return body;
}

export function optionalBoolean(body: Record<string, unknown>, field: string): boolean {
  const value = body[field];
  if (value === undefined || value === null) return false;
  if (typeof value !== 'boolean') throw invalid(field, 'must be a boolean');
  return value;
}

/** The text of the conversation's last user message: what routing rules match and turn.started hashes. */
export function lastUserText(request: Pick<InboundRequest, 'messages'>): string {
  for (let i = request.messages.length - 1; i >= 0; i -= 1) {
    const message = request.messages[i]!;
    if (message.role === 'user')
      return message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
  }
  return '';
}
