import type { ClientToolDeclaration } from '../../runtime/client-tools.js';
import type { AdapterChunk, ContentBlock, ConversationMessage } from '../../runtime/model-adapter.js';
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
 * OpenAI's Responses API (`POST /v1/responses`): `instructions`, `input` as a string or a list of items
 * (messages, `function_call`, `function_call_output`), `tools` of type function. The answer is a
 * `response` object, or its `response.*` stream events with their `sequence_number`. metis keeps no
 * response to continue from: `previous_response_id` is refused, the client sends the whole input.
 */
export const openaiResponses: InboundFormat = {
  shape: 'openai',
  api: 'responses',
  parse,
  answer: (outcome, id) => responseOf(outcome, id, 'completed'),
  stream: (model, id) => new ResponseStream(model, id),
};

function parse(raw: unknown): InboundRequest {
  const body = requireObject(raw);
  const model = requireModel(body);
  if (body.previous_response_id !== undefined && body.previous_response_id !== null)
    throw invalid('previous_response_id', 'metis stores no responses: send the whole conversation in input');
  const system: string[] = [];
  if (typeof body.instructions === 'string' && body.instructions !== '') system.push(body.instructions);
  const messages: ConversationMessage[] = [];
  const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : body.input;
  if (!Array.isArray(input) || input.length === 0)
    throw invalid('input', 'must be a string or a non-empty list');
  input.forEach((item: unknown, i) => {
    const at = `input[${i}]`;
    if (!isRecord(item)) throw invalid(at, 'must be an object');
    if (item.type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string')
        throw invalid(at, 'a function_call needs call_id and name');
      const block: ContentBlock = {
        type: 'tool_use',
        id: item.call_id,
        name: item.name,
        input: parseArguments(`${at}.arguments`, item.arguments),
      };
      const last = messages.at(-1);
      if (last?.role === 'assistant') (last.content as ContentBlock[]).push(block);
      else messages.push({ role: 'assistant', content: [block] });
      return;
    }
    if (item.type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw invalid(`${at}.call_id`, 'is required');
      pushToolResult(messages, {
        type: 'tool_result',
        tool_use_id: item.call_id,
        content: textOfParts(`${at}.output`, item.output),
        is_error: false,
      });
      return;
    }
    if (item.type === 'reasoning') return; // a model's own reasoning item: nothing to hand on
    if (item.type !== undefined && item.type !== 'message')
      throw invalid(`${at}.type`, 'must be message, function_call or function_call_output');
    switch (item.role) {
      case 'system':
      case 'developer':
        system.push(textOfParts(`${at}.content`, item.content));
        return;
      case 'user':
        messages.push({ role: 'user', content: userContent(at, item.content) });
        return;
      case 'assistant': {
        const text = textOfParts(`${at}.content`, item.content);
        messages.push({ role: 'assistant', content: text === '' ? [] : [{ type: 'text', text }] });
        return;
      }
      default:
        throw invalid(`${at}.role`, 'must be one of system, developer, user, assistant');
    }
  });
  return {
    api: 'responses',
    model,
    system: system.length === 0 ? null : system.join('\n\n'),
    messages,
    tools: tools(body.tools),
    stream: optionalBoolean(body, 'stream'),
    includeUsage: false,
    sampling: samplingOf(body, { maxTokens: ['max_output_tokens'], stop: null }),
  };
}

function userContent(at: string, content: unknown): ContentBlock[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) throw invalid(`${at}.content`, 'must be a string or a list of parts');
  return content.map((part: unknown, j): ContentBlock => {
    const where = `${at}.content[${j}]`;
    if (!isRecord(part)) throw invalid(where, 'must be an object');
    if ((part.type === 'input_text' || part.type === 'text') && typeof part.text === 'string')
      return { type: 'text', text: part.text };
    if (part.type === 'input_image' && typeof part.image_url === 'string')
      return imageFromUrl(`${where}.image_url`, part.image_url);
    throw invalid(`${where}.type`, 'only input_text and input_image (with image_url) parts are supported');
  });
}

function tools(list: unknown): ClientToolDeclaration[] {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) throw invalid('tools', 'must be a list');
  return list.map((tool: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isRecord(tool) || tool.type !== 'function')
      throw invalid(`${at}.type`, 'only function tools are offered through metis');
    if (typeof tool.name !== 'string' || tool.name === '') throw invalid(`${at}.name`, 'is required');
    return {
      name: tool.name,
      description: typeof tool.description === 'string' ? tool.description : '',
      parameters: isRecord(tool.parameters) ? tool.parameters : { type: 'object', properties: {} },
    };
  });
}

function messageItem(id: string, text: string, status: 'in_progress' | 'completed') {
  return {
    type: 'message',
    id: `msg_${id}`,
    status,
    role: 'assistant',
    content: status === 'completed' ? [outputText(text)] : [],
  };
}

function outputText(text: string) {
  return { type: 'output_text', text, annotations: [] };
}

function callItem(id: string, name: string, args: string, status: 'in_progress' | 'completed') {
  return { type: 'function_call', id: `fc_${id}`, call_id: id, name, arguments: args, status };
}

function outputOf(outcome: CallOutcome, id: string): unknown[] {
  const items: unknown[] = [];
  const text = answerText(outcome.content);
  if (text !== '') items.push(messageItem(id, text, 'completed'));
  for (const block of outcome.content)
    if (block.type === 'tool_use')
      items.push(callItem(block.id, block.name, JSON.stringify(block.input), 'completed'));
  return items;
}

function responseOf(
  outcome: CallOutcome | null,
  id: string,
  status: 'in_progress' | 'completed' | 'incomplete',
  model = outcome?.model ?? '',
): Record<string, unknown> {
  const usage =
    outcome === null
      ? null
      : {
          input_tokens: outcome.usage.input_tokens,
          input_tokens_details: { cached_tokens: outcome.usage.cached_input_tokens },
          output_tokens: outcome.usage.output_tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: outcome.usage.input_tokens + outcome.usage.output_tokens,
        };
  return {
    id: `resp_${id}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status,
    model,
    output: outcome === null ? [] : outputOf(outcome, id),
    usage,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    temperature: null,
    top_p: null,
    tool_choice: 'auto',
    tools: [],
    text: { format: { type: 'text' } },
  };
}

/**
 * The `response.*` events: created, in_progress, then per output item added → deltas → done, then
 * completed. Text goes into one message item (opened at the first text); each tool call is its own
 * function_call item.
 */
class ResponseStream implements StreamEncoder {
  private sequence = 0;
  private outputs = 0;
  private message: { index: number; text: string } | null = null;
  private readonly calls = new Map<string, { index: number; name: string; args: string }>();

  constructor(
    private readonly model: string,
    private readonly id: string,
  ) {}

  open(): string {
    const response = responseOf(null, this.id, 'in_progress', this.model);
    return this.event('response.created', { response }) + this.event('response.in_progress', { response });
  }

  chunk(chunk: AdapterChunk): string {
    switch (chunk.kind) {
      case 'text':
        return this.text(chunk.text);
      case 'tool_use_start': {
        const index = this.outputs++;
        this.calls.set(chunk.tool_use_id, { index, name: chunk.tool_name, args: '' });
        return this.event('response.output_item.added', {
          output_index: index,
          item: callItem(chunk.tool_use_id, chunk.tool_name, '', 'in_progress'),
        });
      }
      case 'tool_input': {
        const call = this.calls.get(chunk.tool_use_id);
        if (call === undefined) return '';
        call.args += chunk.partial_json;
        return this.event('response.function_call_arguments.delta', {
          item_id: `fc_${chunk.tool_use_id}`,
          output_index: call.index,
          delta: chunk.partial_json,
        });
      }
      case 'tool_use_end': {
        const call = this.calls.get(chunk.tool_use_id);
        if (call === undefined) return '';
        const args = JSON.stringify(chunk.final_input);
        return (
          this.event('response.function_call_arguments.done', {
            item_id: `fc_${chunk.tool_use_id}`,
            output_index: call.index,
            arguments: args,
          }) +
          this.event('response.output_item.done', {
            output_index: call.index,
            item: callItem(chunk.tool_use_id, call.name, args, 'completed'),
          })
        );
      }
      default:
        return '';
    }
  }

  close(outcome: CallOutcome): string {
    let text = '';
    const message = this.message;
    if (message !== null) {
      const at = { item_id: `msg_${this.id}`, output_index: message.index, content_index: 0 };
      text +=
        this.event('response.output_text.done', { ...at, text: message.text }) +
        this.event('response.content_part.done', { ...at, part: outputText(message.text) }) +
        this.event('response.output_item.done', {
          output_index: message.index,
          item: messageItem(this.id, message.text, 'completed'),
        });
    }
    const status = outcome.stopReason === 'max_tokens' ? 'incomplete' : 'completed';
    const type = status === 'completed' ? 'response.completed' : 'response.incomplete';
    return text + this.event(type, { response: responseOf(outcome, this.id, status) });
  }

  fail(error: GatewayError): string {
    const { error: body } = openaiErrorBody(error) as { error: { message: string; code: string | null } };
    return this.event('error', { code: body.code, message: body.message, param: error.param });
  }

  private text(delta: string): string {
    let text = '';
    if (this.message === null) {
      this.message = { index: this.outputs++, text: '' };
      text +=
        this.event('response.output_item.added', {
          output_index: this.message.index,
          item: messageItem(this.id, '', 'in_progress'),
        }) +
        this.event('response.content_part.added', {
          item_id: `msg_${this.id}`,
          output_index: this.message.index,
          content_index: 0,
          part: outputText(''),
        });
    }
    this.message.text += delta;
    return (
      text +
      this.event('response.output_text.delta', {
        item_id: `msg_${this.id}`,
        output_index: this.message.index,
        content_index: 0,
        delta,
        logprobs: [],
      })
    );
  }

  private event(type: string, fields: Record<string, unknown>): string {
    return sseFrame({ type, sequence_number: this.sequence++, ...fields }, type);
  }
}
