import type { ContentBlock, ConversationMessage } from '../model-adapter.js';

type ToolResultBlock = Extract<ContentBlock, { type: 'tool_result' }>;

/** Result given to the provider for a tool call whose result never came (the turn was cancelled). */
export const MISSING_TOOL_RESULT = 'No result: the tool call did not complete (the turn was cancelled).';

/**
 * Makes a history acceptable to providers, which reject unpaired tool calls: it starts at the first
 * user message (the stored history is a window), every `tool_use` of an assistant message gets a
 * `tool_result` in the message right after it (an error result when none was stored, e.g. the tools
 * were cancelled), and `tool_result`s whose call is not in the preceding assistant message are dropped.
 */
export function pairToolCalls(messages: readonly ConversationMessage[]): ConversationMessage[] {
  const first = messages.findIndex(
    (m) => m.role === 'user' && !m.content.some((b) => b.type === 'tool_result'),
  );
  const window = first < 0 ? [] : messages.slice(first);
  const out: ConversationMessage[] = [];
  for (let i = 0; i < window.length; i += 1) {
    const message = window[i]!;
    if (message.role === 'assistant') {
      out.push(message);
      const callIds = message.content.flatMap((b) => (b.type === 'tool_use' ? [b.id] : []));
      if (callIds.length === 0) continue;
      const next = window[i + 1];
      const stored = next?.role === 'tool' ? next.content.filter(isToolResult) : [];
      const results = callIds.map(
        (id): ToolResultBlock =>
          stored.find((r) => r.tool_use_id === id) ?? {
            type: 'tool_result',
            tool_use_id: id,
            content: MISSING_TOOL_RESULT,
            is_error: true,
          },
      );
      out.push({ role: 'tool', content: results });
      if (next?.role === 'tool') i += 1;
      continue;
    }
    if (message.role === 'tool') continue; // a tool message without its call before it
    const content = message.content.filter((b) => b.type !== 'tool_result');
    if (content.length > 0) out.push({ role: message.role, content });
  }
  return out;
}

function isToolResult(block: ContentBlock): block is ToolResultBlock {
  return block.type === 'tool_result';
}

/** The API model name of a canonical `provider:name` id (everything after the first colon). */
export function apiModelName(model: string): string {
  return model.slice(model.indexOf(':') + 1);
}

/** Parses a tool input the provider streamed; `{}` when it is empty or not a JSON object. */
export function parseToolInput(json: string): Record<string, unknown> {
  if (json.trim() === '') return {};
  try {
    const value: unknown = JSON.parse(json);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}
