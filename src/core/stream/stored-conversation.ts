import type { Runtime } from '../runtime/runtime.js';

interface Block {
  readonly type: string;
  readonly text?: string;
  readonly id?: string;
  readonly name?: string;
  readonly input?: unknown;
  readonly tool_use_id?: string;
  readonly content?: string;
  readonly is_error?: boolean;
  readonly thinking?: string;
}

/** The text of a tool's result as the model got it, from the session's stored messages; null if none. */
export function storedToolResult(
  runtime: Runtime,
  sessionId: string,
  toolUseId: string,
): { text: string; isError: boolean } | null {
  for (const message of runtime.sessions.messages(sessionId, { limit: 10 }).reverse()) {
    for (const block of message.content as Block[]) {
      if (block.type === 'tool_result' && block.tool_use_id === toolUseId)
        return { text: block.content ?? '', isError: block.is_error === true };
    }
  }
  return null;
}

/**
 * The session's stored conversation as AG-UI messages (`@ag-ui/core` Message): user and assistant
 * text, reasoning, the assistant's tool calls, one tool message per result. Ids are metis's, so they match the
 * ids the run streamed.
 */
export function agUiMessages(runtime: Runtime, sessionId: string): unknown[] {
  const out: unknown[] = [];
  for (const message of runtime.sessions.messages(sessionId, { limit: 200 })) {
    if (message.status !== 'complete') continue;
    const blocks = message.content as Block[];
    const text = blocks
      .filter((b) => b.type === 'text')
      .map((b) => b.text ?? '')
      .join('');
    if (message.role === 'user') out.push({ id: message.id, role: 'user', content: text });
    else if (message.role === 'assistant') {
      // Thinking blocks are reasoning messages, with the ids the run streamed them under.
      blocks.forEach((b, index) => {
        if (b.type === 'thinking')
          out.push({ id: `${message.id}:${index}`, role: 'reasoning', content: b.thinking ?? '' });
      });
      const toolCalls = blocks
        .filter((b) => b.type === 'tool_use')
        .map((b) => ({
          id: b.id,
          type: 'function',
          function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) },
        }));
      out.push({
        id: message.id,
        role: 'assistant',
        ...(text ? { content: text } : {}),
        ...(toolCalls.length > 0 ? { toolCalls } : {}),
      });
    } else {
      for (const block of blocks.filter((b) => b.type === 'tool_result'))
        out.push({
          id: `${block.tool_use_id}:result`,
          role: 'tool',
          content: block.content ?? '',
          toolCallId: block.tool_use_id,
        });
    }
  }
  return out;
}
