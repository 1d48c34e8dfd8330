import type { Runtime } from '../../../runtime/runtime.js';
import type { MessageRecord } from '../../../store/session-store.js';
import type { StoredBlock } from '../../stored-conversation.js';
import { type AgUiInput, textOf } from './ag-ui-input.js';

interface ToolCall {
  readonly id: string;
  readonly type: 'function';
  readonly function: { readonly name: string; readonly arguments: string };
}

/** One AG-UI message of the thread (`@ag-ui/core` Message). */
export type AgUiMessage = { id: string; role: string; content?: string; toolCalls?: ToolCall[] } & Record<
  string,
  unknown
>;

/**
 * The AG-UI id of block `position` of a stored model message: what the run streamed it under and what
 * the snapshot names it. `position` counts the blocks metis stored, so a provider's block index with
 * gaps (a block that streamed nothing) names the same message on both sides.
 */
export function blockMessageId(messageId: string, position: number): string {
  return `${messageId}:${position}`;
}

/** The AG-UI id of a tool's result that metis ran (the client names the results of its own tools). */
export function toolResultMessageId(toolCallId: string): string {
  return `${toolCallId}:result`;
}

/**
 * The ids the client gave the messages metis stores under its own: its user messages and the tool
 * messages of its frontend tools. Without them the closing snapshot would hold those messages twice
 * (the client keeps the ids it knows in place and appends the others).
 */
export interface ClientIds {
  /** The client's ids of its user messages, oldest first, with their text. */
  readonly users: readonly { id: string; text: string }[];
  /** The client's tool message ids, by the tool call they answer. */
  readonly toolResults: ReadonlyMap<string, string>;
}

export function clientIdsOf(messages: AgUiInput['messages']): ClientIds {
  const users: { id: string; text: string }[] = [];
  const toolResults = new Map<string, string>();
  for (const message of messages) {
    if (message.role === 'user') users.push({ id: message.id, text: textOf(message.content) });
    else if (message.role === 'tool' && message.toolCallId !== undefined)
      toolResults.set(message.toolCallId, message.id);
  }
  return { users, toolResults };
}

const NO_CLIENT_IDS: ClientIds = { users: [], toolResults: new Map() };

/**
 * The session's stored conversation as AG-UI messages, under the ids the run streamed and the client
 * holds. Each block of a model message is its own message (blockMessageId): a thinking block a reasoning
 * message, a text block an assistant message; tool calls belong to the text block before them in the
 * same model message, or to an assistant message of their own named after the first of them — the
 * rule the mapper streams by (ag-ui-events.ts). A stored user message takes the id of the client's
 * user message it pairs with: newest with newest, as long as the texts agree (the client sends the
 * whole thread; an older message it no longer has keeps metis's id).
 */
export function agUiThread(
  runtime: Runtime,
  sessionId: string,
  client: ClientIds = NO_CLIENT_IDS,
): AgUiMessage[] {
  return agUiThreadOf(runtime.sessions.messages(sessionId, { limit: THREAD_MESSAGES }), client);
}

/** The newest messages a thread shows. */
export const THREAD_MESSAGES = 200;

/** As `agUiThread`, of messages already read (the newest THREAD_MESSAGES, oldest first). */
export function agUiThreadOf(
  messages: readonly MessageRecord[],
  client: ClientIds = NO_CLIENT_IDS,
): AgUiMessage[] {
  const stored = messages.filter((m) => m.status === 'complete');
  const userIds = pairUsers(
    stored
      .filter((m) => m.role === 'user')
      .map((m) => ({ id: m.id, text: textOfBlocks(m.content as StoredBlock[]) })),
    client.users,
  );
  const out: AgUiMessage[] = [];
  for (const message of stored) {
    const blocks = message.content as StoredBlock[];
    if (message.role === 'user')
      out.push({ id: userIds.get(message.id) ?? message.id, role: 'user', content: textOfBlocks(blocks) });
    else if (message.role === 'assistant') out.push(...assistantMessages(message.id, blocks));
    else
      for (const block of blocks.filter((b) => b.type === 'tool_result')) {
        const toolCallId = block.tool_use_id ?? '';
        out.push({
          id: client.toolResults.get(toolCallId) ?? toolResultMessageId(toolCallId),
          role: 'tool',
          content: block.content ?? '',
          toolCallId,
        });
      }
  }
  return out;
}

function assistantMessages(messageId: string, blocks: readonly StoredBlock[]): AgUiMessage[] {
  const out: AgUiMessage[] = [];
  let carrier: AgUiMessage | null = null;
  blocks.forEach((block, position) => {
    const id = blockMessageId(messageId, position);
    // Redacted thinking streamed as a reasoning message with no text; so it stays one here.
    if (block.type === 'thinking' || block.type === 'redacted_thinking')
      out.push({ id, role: 'reasoning', content: block.thinking ?? '' });
    else if (block.type === 'text') {
      carrier = { id, role: 'assistant', content: block.text ?? '' };
      out.push(carrier);
    } else if (block.type === 'tool_use') {
      if (carrier === null) {
        carrier = { id, role: 'assistant' };
        out.push(carrier);
      }
      const call: ToolCall = {
        id: block.id ?? '',
        type: 'function',
        function: { name: block.name ?? '', arguments: JSON.stringify(block.input ?? {}) },
      };
      carrier.toolCalls = [...(carrier.toolCalls ?? []), call];
    }
  });
  return out;
}

/** Stored user message id → the client's id, pairing newest with newest while the texts agree. */
function pairUsers(
  stored: readonly { id: string; text: string }[],
  client: readonly { id: string; text: string }[],
): Map<string, string> {
  const pairs = new Map<string, string>();
  for (let s = stored.length - 1, c = client.length - 1; s >= 0 && c >= 0; s -= 1, c -= 1) {
    if (stored[s]!.text !== client[c]!.text) break;
    pairs.set(stored[s]!.id, client[c]!.id);
  }
  return pairs;
}

function textOfBlocks(blocks: readonly StoredBlock[]): string {
  return blocks
    .filter((b) => b.type === 'text')
    .map((b) => b.text ?? '')
    .join('');
}
