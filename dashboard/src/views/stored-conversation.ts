import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import type { Report } from '../report.js';
import { type Message, NOTHING_STORED, type StoredConversation, type ToolResult } from './conversation.js';

interface StoredMessage {
  id: string;
  session_id: string;
  turn_id: string | null;
  role: 'user' | 'assistant' | 'tool';
  model: string | null;
  status: string;
  content: { type: string; text?: string; tool_use_id?: string; content?: string; is_error?: boolean }[];
}

/** Reads the stored conversation again each time `version` changes (a turn started, a tool ended). */
export function useStoredConversation(
  sessionId: string,
  version: string,
  report: Report,
): StoredConversation {
  const [stored, setStored] = useState<StoredConversation>(NOTHING_STORED);
  useEffect(() => {
    let stopped = false;
    api<{ messages: StoredMessage[] }>('GET', `/sessions/${encodeURIComponent(sessionId)}/messages?limit=500`)
      .then(({ messages }) => {
        if (stopped) return;
        const userMessages = new Map<string, Message>();
        const toolResults = new Map<string, ToolResult>();
        for (const message of messages) {
          if (message.role === 'user' && message.turn_id !== null)
            userMessages.set(message.turn_id, {
              id: message.id,
              session_id: message.session_id,
              turn_id: message.turn_id,
              role: 'user',
              model: null,
              status: 'complete',
              stop_reason: null,
              usage: null,
              blocks: message.content
                .filter((block) => block.type === 'text')
                .map((block) => ({ type: 'text' as const, text: block.text ?? '' })),
            });
          for (const block of message.content)
            if (block.type === 'tool_result' && block.tool_use_id)
              toolResults.set(block.tool_use_id, {
                content: block.content ?? '',
                is_error: block.is_error === true,
              });
        }
        setStored({ userMessages, toolResults });
      })
      .catch((error) => {
        // A session that does not exist is the live view's to say; other failures go to the page.
        if (!stopped) report(error);
      });
    return () => {
      stopped = true;
    };
  }, [sessionId, version, report]);
  return stored;
}
