import type { ClientToolDeclaration } from '../../runtime/client-tools.js';
import type {
  AdapterChunk,
  ContentBlock,
  ConversationMessage,
  StopReason,
} from '../../runtime/model-adapter.js';
import type { GatewayError } from '../gateway-error.js';
import { imageFromUrl } from './images.js';
import {
  answerText,
  type CallOutcome,
  type InboundFormat,
  type InboundRequest,
  invalid,
  isRecord,
  optionalBoolean,
  parseArguments,
  pushToolResult,
  requireModel,
  requireObject,
  type StreamEncoder,
  samplingOf,
  sseFrame,
  textOfParts,
} from './inbound-request.js';
import { openaiErrorBody } from './provider-errors.js';

/**
 * OpenAI's Chat Completions (`POST /v1/chat/completions`): `messages` with the roles system, developer,
 * user, assistant (with `tool_calls`) and tool; `tools` of type function. The answer is a
 * `chat.completion`, or `chat.completion.chunk`s ending with `data: [DONE]`.
 */
export const openaiChat: InboundFormat = {
  shape: 'openai',
  api: 'chat_completions',
  parse,
  answer,
  stream: (model, id, includeUsage) => new ChatStream(model, id, includeUsage),
};

function parse(raw: unknown): InboundRequest {
  const body = requireObject(raw);
  const model = requireModel(body);
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    throw invalid('messages', 'must be a non-empty list');
  const system: string[] = [];
  const messages: ConversationMessage[] = [];
  body.messages.forEach((message: unknown, i) => {
    const at = `messages[${i}]`;
    if (!isRecord(message)) throw invalid(at, 'must be an object');
    switch (message.role) {
      case 'system':
      case 'developer':
        system.push(textOfParts(`${at}.content`, message.content));
        return;
      case 'user':
        messages.push({ role: 'user', content: userContent(at, message.content) });
        return;
      case 'assistant':
        messages.push({ role: 'assistant', content: assistantContent(at, message) });
        return;
      case 'tool': {
        if (typeof message.tool_call_id !== 'string' || message.tool_call_id === '')
          throw invalid(`${at}.tool_call_id`, 'is required');
        pushToolResult(messages, {
          type: 'tool_result',
          tool_use_id: message.tool_call_id,
          content: textOfParts(`${at}.content`, message.content),
          is_error: false,
        });
        return;
      }
      default:
        throw invalid(`${at}.role`, 'must be one of system, developer, user, assistant, tool');
    }
  });
  const stream = optionalBoolean(body, 'stream');
  const options = body.stream_options;
  return {
    api: 'chat_completions',
    model,
    system: system.length === 0 ? null : system.join('\n\n'),
    messages,
    tools: tools(body.tools),
    stream,
    includeUsage: stream && isRecord(options) && options.include_usage === true,
    sampling: samplingOf(body, { maxTokens: ['max_completion_tokens', 'max_tokens'], stop: 'stop' }),
  };
}

function userContent(at: string, content: unknown): ContentBlock[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) throw invalid(`${at}.content`, 'must be a string or a list of parts');
  return content.map((part: unknown, j): ContentBlock => {
    const where = `${at}.content[${j}]`;
    if (!isRecord(part)) throw invalid(where, 'must be an object');
    if (part.type === 'text' && typeof part.text === 'string') return { type: 'text', text: part.text };
    if (part.type === 'image_url' && isRecord(part.image_url) && typeof part.image_url.url === 'string')
      return imageFromUrl(`${where}.image_url.url`, part.image_url.url);
    throw invalid(`${where}.type`, 'only text and image_url parts are supported');
  });
}

function assistantContent(at: string, message: Record<string, unknown>): ContentBlock[] {
  const content: ContentBlock[] = [];
  const text =
    message.content === null || message.content === undefined
      ? ''
      : textOfParts(`${at}.content`, message.content);
  if (text !== '') content.push({ type: 'text', text });
  const calls = message.tool_calls ?? [];
  if (!Array.isArray(calls)) throw invalid(`${at}.tool_calls`, 'must be a list');
  calls.forEach((call: unknown, k) => {
    const where = `${at}.tool_calls[${k}]`;
    if (!isRecord(call) || typeof call.id !== 'string' || !isRecord(call.function))
      throw invalid(where, 'must be {id, type: "function", function: {name, arguments}}');
    if (typeof call.function.name !== 'string') throw invalid(`${where}.function.name`, 'is required');
    content.push({
      type: 'tool_use',
      id: call.id,
      name: call.function.name,
      input: parseArguments(`${where}.function.arguments`, call.function.arguments),
    });
  });
  return content;
}

function tools(list: unknown): ClientToolDeclaration[] {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) throw invalid('tools', 'must be a list');
  return list.map((tool: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isRecord(tool) || tool.type !== 'function' || !isRecord(tool.function))
      throw invalid(at, 'must be {type: "function", function: {name, description, parameters}}');
    const fn = tool.function;
    if (typeof fn.name !== 'string' || fn.name === '') throw invalid(`${at}.function.name`, 'is required');
    return {
      name: fn.name,
      description: typeof fn.description === 'string' ? fn.description : '',
      parameters: isRecord(fn.parameters) ? fn.parameters : { type: 'object', properties: {} },
    };
  });
}

const FINISH: Record<StopReason, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
};

function usageOf(outcome: CallOutcome) {
  const { input_tokens, output_tokens, cached_input_tokens } = outcome.usage;
  return {
    prompt_tokens: input_tokens,
    completion_tokens: output_tokens,
    total_tokens: input_tokens + output_tokens,
    prompt_tokens_details: { cached_tokens: cached_input_tokens },
  };
}

function answer(outcome: CallOutcome, id: string): unknown {
  const text = answerText(outcome.content);
  const calls = outcome.content.flatMap((b) =>
    b.type === 'tool_use'
      ? [{ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } }]
      : [],
  );
  return {
    id: `chatcmpl-${id}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: outcome.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: text === '' && calls.length > 0 ? null : text,
          refusal: null,
          ...(calls.length > 0 ? { tool_calls: calls } : {}),
        },
        finish_reason: FINISH[outcome.stopReason],
        logprobs: null,
      },
    ],
    usage: usageOf(outcome),
    system_fingerprint: null,
  };
}

/** `chat.completion.chunk`s: a role chunk, content and tool call deltas, the finish, [DONE]. */
class ChatStream implements StreamEncoder {
  private readonly created = Math.floor(Date.now() / 1000);
  /** Tool calls by their id, numbered in the order they began (`tool_calls[].index`). */
  private readonly callIndex = new Map<string, number>();

  constructor(
    private readonly model: string,
    private readonly id: string,
    private readonly includeUsage: boolean,
  ) {}

  open(): string {
    return this.frame({ role: 'assistant', content: '' }, null);
  }

  chunk(chunk: AdapterChunk): string {
    switch (chunk.kind) {
      case 'text':
        return this.frame({ content: chunk.text }, null);
      case 'tool_use_start': {
        const index = this.callIndex.size;
        this.callIndex.set(chunk.tool_use_id, index);
        return this.frame(
          {
            tool_calls: [
              {
                index,
                id: chunk.tool_use_id,
                type: 'function',
                function: { name: chunk.tool_name, arguments: '' },
              },
            ],
          },
          null,
        );
      }
      case 'tool_input':
        return this.frame(
          {
            tool_calls: [
              {
                index: this.callIndex.get(chunk.tool_use_id) ?? 0,
                function: { arguments: chunk.partial_json },
              },
            ],
          },
          null,
        );
      default:
        // Thinking has no place in a chat completion; a tool call's end is its last argument delta.
        return '';
    }
  }

  close(outcome: CallOutcome): string {
    let text = this.frame({}, FINISH[outcome.stopReason]);
    if (this.includeUsage) text += sseFrame({ ...this.base(), choices: [], usage: usageOf(outcome) });
    return `${text}data: [DONE]\n\n`;
  }

  fail(error: GatewayError): string {
    return `${sseFrame(openaiErrorBody(error))}data: [DONE]\n\n`;
  }

  private base() {
    return {
      id: `chatcmpl-${this.id}`,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.model,
    };
  }

  private frame(delta: Record<string, unknown>, finish: string | null): string {
    return sseFrame({
      ...this.base(),
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    });
  }
}
