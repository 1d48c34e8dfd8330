import type { Attributes } from '@opentelemetry/api';
import type { StoredMessage, StoredToolCall, TraceQuery } from './define-plugin.js';
import { readNowOrLater, thenOrNow } from './read-now-or-later.js';

/**
 * The conversation's content as the OpenTelemetry GenAI semantic conventions carry it, for the `otel`
 * plugin's opt-in `capture_content`: `gen_ai.input.messages` / `gen_ai.output.messages` (JSON arrays of
 * `{role, parts}`; a part is `text`, `reasoning`, `tool_call` or `tool_call_response`) on model calls and
 * turns, `gen_ai.tool.call.arguments` / `gen_ai.tool.call.result` on tool calls. Read from the message
 * and tool-call store when the span ends (both are stored before the event that ends it): at the call
 * where the store answers synchronously, else (PostgreSQL alone) through its asynchronous reads, so a
 * method returns a promise only there.
 */
export interface ContentLimits {
  /** Messages of the history put in a model call's input (the newest). */
  readonly maxMessages: number;
  /** Characters of one attribute; longer JSON is cut and marked `…[truncated]`. */
  readonly maxChars: number;
}

export const CONTENT = {
  input: 'gen_ai.input.messages',
  output: 'gen_ai.output.messages',
  toolArguments: 'gen_ai.tool.call.arguments',
  toolResult: 'gen_ai.tool.call.result',
} as const;

type Part = Record<string, unknown>;

function partsOf(message: StoredMessage): Part[] {
  const parts: Part[] = [];
  for (const block of message.content) {
    switch (block.type) {
      case 'text':
        parts.push({ type: 'text', content: block.text });
        break;
      case 'thinking':
        parts.push({ type: 'reasoning', content: block.thinking });
        break;
      case 'tool_use':
        parts.push({ type: 'tool_call', id: block.id, name: block.name, arguments: block.input });
        break;
      case 'tool_result':
        parts.push({ type: 'tool_call_response', id: block.tool_use_id, response: block.content });
        break;
    }
  }
  return parts;
}

const semconvMessage = (message: StoredMessage) => ({ role: message.role, parts: partsOf(message) });
const ulidOf = (id: string) => id.slice(id.indexOf('_') + 1);

/** `stop` etc. as the conventions spell a finish reason, from the provider's stop reason. */
function finishReason(stopReason: string | null): string {
  switch (stopReason) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop';
    case 'max_tokens':
      return 'length';
    case 'tool_use':
      return 'tool_call';
    default:
      return 'error';
  }
}

export class ContentReader {
  constructor(
    private readonly store: TraceQuery,
    private readonly limits: ContentLimits,
  ) {}

  private json(value: unknown): string {
    const text = typeof value === 'string' ? value : JSON.stringify(value ?? null);
    return text.length <= this.limits.maxChars ? text : `${text.slice(0, this.limits.maxChars)}…[truncated]`;
  }

  /** A model call (started by `startId`, ended by `endId`): the history it was sent and its answer. */
  modelCall(
    sessionId: string,
    startId: string,
    endId: string,
    stopReason: string | null,
  ): Attributes | Promise<Attributes> {
    return thenOrNow(this.messagesBefore(sessionId, endId, this.limits.maxMessages + 1), (messages) => {
      const start = ulidOf(startId);
      const input = messages.filter((m) => ulidOf(m.id) < start).slice(-this.limits.maxMessages);
      const answer = messages.filter((m) => ulidOf(m.id) > start && m.role === 'assistant').at(-1);
      return {
        [CONTENT.input]: this.json(input.map(semconvMessage)),
        ...(answer === undefined
          ? {}
          : {
              [CONTENT.output]: this.json([
                { ...semconvMessage(answer), finish_reason: finishReason(stopReason) },
              ]),
            }),
      };
    });
  }

  /** A turn (from `startId` to `endId`): the user's message and the last answer. */
  turn(sessionId: string, startId: string, endId: string): Attributes | Promise<Attributes> {
    const start = ulidOf(startId);
    return thenOrNow(this.messagesBefore(sessionId, endId, 200), (before) => {
      const messages = before.filter((m) => ulidOf(m.id) > start);
      const user = messages.find((m) => m.role === 'user');
      const answer = messages.filter((m) => m.role === 'assistant').at(-1);
      return {
        ...(user === undefined ? {} : { [CONTENT.input]: this.json([semconvMessage(user)]) }),
        ...(answer === undefined ? {} : { [CONTENT.output]: this.json([semconvMessage(answer)]) }),
      };
    });
  }

  /** A tool call: its input and what it returned. */
  toolCall(sessionId: string, toolUseId: string): Attributes | Promise<Attributes> {
    const { store } = this;
    const read = store.toolCall;
    if (read === undefined) return {};
    const call = readNowOrLater<StoredToolCall | null>(
      () => read.call(store, sessionId, toolUseId),
      () => store.async.toolCall(sessionId, toolUseId),
    );
    return thenOrNow(call, (found): Attributes => {
      if (!found) return {};
      return {
        [CONTENT.toolArguments]: this.json(found.input),
        ...(found.output === null || found.output === undefined
          ? {}
          : { [CONTENT.toolResult]: this.json(found.output) }),
      };
    });
  }

  /** A host without a message store has none (`messagesBefore` is optional): no content then. */
  private messagesBefore(
    sessionId: string,
    eventId: string,
    limit: number,
  ): readonly StoredMessage[] | Promise<readonly StoredMessage[]> {
    const { store } = this;
    const read = store.messagesBefore;
    if (read === undefined) return [];
    return readNowOrLater<readonly StoredMessage[]>(
      () => read.call(store, sessionId, eventId, limit),
      () => store.async.messagesBefore(sessionId, eventId, limit),
    );
  }
}
