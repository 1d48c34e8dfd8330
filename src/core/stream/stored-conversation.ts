import type { Runtime } from '../runtime/runtime.js';

/** A content block of a stored message, as its JSON holds it. */
export interface StoredBlock {
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
    for (const block of message.content as StoredBlock[]) {
      if (block.type === 'tool_result' && block.tool_use_id === toolUseId)
        return { text: block.content ?? '', isError: block.is_error === true };
    }
  }
  return null;
}
