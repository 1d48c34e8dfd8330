import type { ClientToolDeclaration } from '../../runtime/client-tools.js';
import type { AdapterChunk, ContentBlock, ConversationMessage } from '../../runtime/model-adapter.js';
import type { GatewayError } from '../gateway-error.js';
import { imageFromSource } from './images.js';
import {
  type CallOutcome,
  type InboundFormat,
  type InboundRequest,
  invalid,
  isRecord,
  optionalBoolean,
  pushToolResult,
  requireModel,
  requireObject,
  type StreamEncoder,
  samplingOf,
  sseFrame,
  textOfParts,
} from './inbound-request.js';
import { anthropicErrorBody } from './provider-errors.js';

/**
 * Anthropic's Messages API (`POST /v1/messages`): `system`, `messages` of user and assistant turns with
 * text, image, tool_use, tool_result and thinking blocks, `tools` with an `input_schema`. The answer is a
 * `message`, or its named stream events (message_start … message_stop).
 */
export const anthropicMessages: InboundFormat = {
  shape: 'anthropic',
  api: 'messages',
  parse,
  answer,
  stream: (model, id) => new MessageStream(model, id),
};

function parse(raw: unknown): InboundRequest {
  const body = requireObject(raw);
  const model = requireModel(body);
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    throw invalid('messages', 'must be a non-empty list');
  const messages: ConversationMessage[] = [];
  body.messages.forEach((message: unknown, i) => {
    const at = `messages[${i}]`;
    if (!isRecord(message)) throw invalid(at, 'must be an object');
    if (message.role !== 'user' && message.role !== 'assistant')
      throw invalid(`${at}.role`, 'must be user or assistant');
    const blocks = blocksOf(at, message.content, message.role);
    if (message.role === 'assistant') {
      messages.push({ role: 'assistant', content: blocks });
      return;
    }
    // A user turn's tool results are the tool message of metis's history; its other blocks follow it.
    const rest: ContentBlock[] = [];
    for (const block of blocks) {
      if (block.type === 'tool_result') pushToolResult(messages, block);
      else rest.push(block);
    }
    if (rest.length > 0) messages.push({ role: 'user', content: rest });
  });
  return {
    api: 'messages',
    model,
    system: systemOf(body.system),
    messages,
    tools: tools(body.tools),
    stream: optionalBoolean(body, 'stream'),
    includeUsage: false,
    sampling: samplingOf(body, { maxTokens: ['max_tokens'], stop: 'stop_sequences' }),
  };
}

function systemOf(system: unknown): string | null {
  if (system === undefined || system === null) return null;
  const text = textOfParts('system', system);
  return text === '' ? null : text;
}

function blocksOf(at: string, content: unknown, role: 'user' | 'assistant'): ContentBlock[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) throw invalid(`${at}.content`, 'must be a string or a list of blocks');
  return content.map((block: unknown, j): ContentBlock => {
    const where = `${at}.content[${j}]`;
    if (!isRecord(block)) throw invalid(where, 'must be an object');
    switch (block.type) {
      case 'text':
        if (typeof block.text !== 'string') throw invalid(`${where}.text`, 'must be a string');
        return { type: 'text', text: block.text };
      case 'image':
        return imageFromSource(`${where}.source`, block.source);
      case 'tool_use':
        if (role !== 'assistant') throw invalid(where, 'tool_use blocks belong to assistant messages');
        if (typeof block.id !== 'string' || typeof block.name !== 'string')
          throw invalid(where, 'must have an id and a name');
        return {
          type: 'tool_use',
          id: block.id,
          name: block.name,
          input: isRecord(block.input) ? block.input : {},
        };
      case 'tool_result':
        if (role !== 'user') throw invalid(where, 'tool_result blocks belong to user messages');
        if (typeof block.tool_use_id !== 'string') throw invalid(`${where}.tool_use_id`, 'is required');
        return {
          type: 'tool_result',
          tool_use_id: block.tool_use_id,
          content: block.content === undefined ? '' : textOfParts(`${where}.content`, block.content),
          is_error: block.is_error === true,
        };
      case 'thinking':
        return {
          type: 'thinking',
          thinking: typeof block.thinking === 'string' ? block.thinking : '',
          signature: typeof block.signature === 'string' ? block.signature : null,
        };
      case 'redacted_thinking':
        return { type: 'redacted_thinking', data: typeof block.data === 'string' ? block.data : '' };
      default:
        throw invalid(
          `${where}.type`,
          'must be one of text, image, tool_use, tool_result, thinking, redacted_thinking',
        );
    }
  });
}

function tools(list: unknown): ClientToolDeclaration[] {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) throw invalid('tools', 'must be a list');
  return list.map((tool: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isRecord(tool)) throw invalid(at, 'must be an object');
    if (tool.type !== undefined && tool.type !== 'custom')
      throw invalid(`${at}.type`, 'server tools are not offered through metis; declare your own tool');
    if (typeof tool.name !== 'string' || tool.name === '') throw invalid(`${at}.name`, 'is required');
    if (!isRecord(tool.input_schema)) throw invalid(`${at}.input_schema`, 'must be a JSON Schema object');
    return {
      name: tool.name,
      description: typeof tool.description === 'string' ? tool.description : '',
      parameters: tool.input_schema,
    };
  });
}

function outputBlock(block: ContentBlock): unknown {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.text, citations: null };
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature ?? '' };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'tool_use':
      return { type: 'tool_use', id: block.id, name: block.name, input: block.input };
    default:
      return null;
  }
}

function usageOf(outcome: CallOutcome) {
  return {
    input_tokens: outcome.usage.input_tokens,
    output_tokens: outcome.usage.output_tokens,
    cache_creation_input_tokens: outcome.usage.cache_creation_input_tokens,
    cache_read_input_tokens: outcome.usage.cached_input_tokens,
  };
}

function answer(outcome: CallOutcome, id: string): unknown {
  return {
    id: `msg_${id}`,
    type: 'message',
    role: 'assistant',
    model: outcome.model,
    content: outcome.content.map(outputBlock).filter((b) => b !== null),
    stop_reason: outcome.stopReason,
    stop_sequence: null,
    usage: usageOf(outcome),
  };
}

/**
 * The named events of a streamed message. The adapter's block indexes are renumbered from 0 in the
 * order blocks begin; a block is stopped when the next one begins, or at the end.
 */
class MessageStream implements StreamEncoder {
  private readonly indexOf = new Map<number, number>();
  private current: { index: number; kind: AdapterChunk['kind'] } | null = null;

  constructor(
    private readonly model: string,
    private readonly id: string,
  ) {}

  open(): string {
    return sseFrame(
      {
        type: 'message_start',
        message: {
          id: `msg_${this.id}`,
          type: 'message',
          role: 'assistant',
          model: this.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      },
      'message_start',
    );
  }

  chunk(chunk: AdapterChunk): string {
    let text = '';
    let index = this.indexOf.get(chunk.index);
    if (index === undefined) {
      text += this.stopOpen();
      index = this.indexOf.size;
      this.indexOf.set(chunk.index, index);
      this.current = { index, kind: chunk.kind };
      text += event('content_block_start', { index, content_block: startBlock(chunk) });
    }
    const delta = deltaOf(chunk);
    if (delta !== null) text += event('content_block_delta', { index, delta });
    if (chunk.kind === 'thinking' && chunk.signature !== null)
      text += event('content_block_delta', {
        index,
        delta: { type: 'signature_delta', signature: chunk.signature },
      });
    return text;
  }

  close(outcome: CallOutcome): string {
    return (
      this.stopOpen() +
      event('message_delta', {
        delta: { stop_reason: outcome.stopReason, stop_sequence: null },
        usage: usageOf(outcome),
      }) +
      event('message_stop', {})
    );
  }

  fail(error: GatewayError): string {
    return sseFrame(anthropicErrorBody(error), 'error');
  }

  private stopOpen(): string {
    if (this.current === null) return '';
    const { index } = this.current;
    this.current = null;
    return event('content_block_stop', { index });
  }
}

function event(type: string, fields: Record<string, unknown>): string {
  return sseFrame({ type, ...fields }, type);
}

function startBlock(chunk: AdapterChunk): unknown {
  switch (chunk.kind) {
    case 'thinking':
      return { type: 'thinking', thinking: '', signature: '' };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: chunk.data };
    case 'tool_use_start':
    case 'tool_input':
    case 'tool_use_end':
      return {
        type: 'tool_use',
        id: chunk.tool_use_id,
        name: chunk.kind === 'tool_use_start' ? chunk.tool_name : '',
        input: {},
      };
    default:
      return { type: 'text', text: '', citations: null };
  }
}

function deltaOf(chunk: AdapterChunk): unknown {
  switch (chunk.kind) {
    case 'text':
      return { type: 'text_delta', text: chunk.text };
    case 'thinking':
      return chunk.text === '' ? null : { type: 'thinking_delta', thinking: chunk.text };
    case 'tool_input':
      return { type: 'input_json_delta', partial_json: chunk.partial_json };
    default:
      return null;
  }
}
