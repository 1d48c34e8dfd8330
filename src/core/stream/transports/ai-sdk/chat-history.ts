import { z } from 'zod';
import { MetisError } from '../../../errors.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { ConversationReads } from '../../../store/conversation-reads.js';

/**
 * A UI message part as the chat route reads it (ai 6 `UIMessagePart`): text, and a tool part's
 * approval, which the UI answers with `addToolApprovalResponse` (state `approval-responded`).
 */
export const ChatPart = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  state: z.string().optional(),
  approval: z
    .looseObject({ id: z.string(), approved: z.boolean().optional(), reason: z.string().optional() })
    .optional(),
});

export const ChatMessage = z.looseObject({
  role: z.enum(['system', 'user', 'assistant']),
  parts: z.array(ChatPart),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

/** An approval the user answered in the UI, carried by the next request. */
export interface ApprovalAnswer {
  readonly approvalId: string;
  readonly approved: boolean;
  readonly reason?: string;
}

/** The text of a message's text parts: what a user message gives its turn. */
export function textOf(message: ChatMessage): string {
  return message.parts
    .filter((part) => part.type === 'text')
    .map((part) => part.text ?? '')
    .join('');
}

/** The approvals answered in an assistant message and not yet followed by the tool's output. */
export function answeredApprovals(message: ChatMessage): ApprovalAnswer[] {
  const answers: ApprovalAnswer[] = [];
  for (const part of message.parts) {
    const approval = part.approval;
    if (part.state !== 'approval-responded' || approval?.approved === undefined) continue;
    answers.push({
      approvalId: approval.id,
      approved: approval.approved,
      ...(approval.reason ? { reason: approval.reason } : {}),
    });
  }
  return answers;
}

const NEW_CHAT = 'start a new chat (a new chat id)';

/**
 * Refuses `regenerate()`: metis keeps the chat's conversation, the answer to regenerate included, and
 * cannot take a turn back out of it (docs/ai-sdk.md "History").
 */
export function refuseRegenerate(): never {
  throw new MetisError(
    'METIS_ERR_CHAT_HISTORY_DIVERGED',
    `regenerate is not supported: metis keeps this chat's conversation, the last answer included, and sends all of it to the model; ask again in a new message, or ${NEW_CHAT}`,
  );
}

/**
 * Refuses a request whose history is not the conversation metis keeps for the chat: an edited, removed
 * or cleared message would be shown by the UI and never seen by the model (metis sends its own
 * conversation). The user messages before the one being sent must be those metis ran, in order.
 */
export async function assertSameHistory(
  runtime: Runtime,
  conversations: ConversationReads,
  sessionId: string,
  earlierUserTexts: string[],
): Promise<void> {
  const turns = (await runtime.knowsSession(sessionId)) ? (await runtime.describe(sessionId)).turn_count : 0;
  const sent = earlierUserTexts.length;
  if (sent !== turns) {
    const what =
      sent === 0
        ? `the chat's history was cleared, but metis keeps its ${turns} turn(s) and would still send them to the model`
        : `the history sent has ${sent} user message(s) where metis ran ${turns}: an edited or removed message is not removed from the conversation metis sends to the model`;
    throw new MetisError(
      'METIS_ERR_CHAT_HISTORY_DIVERGED',
      `${what}; send the history metis has, or ${NEW_CHAT}`,
    );
  }
  const ran = await storedUserTexts(conversations, sessionId, turns);
  const offset = sent - ran.length;
  const edited = ran.findIndex((text, at) => text !== earlierUserTexts[offset + at]);
  if (edited === -1) return;
  throw new MetisError(
    'METIS_ERR_CHAT_HISTORY_DIVERGED',
    `user message ${offset + edited + 1} of the history sent is not the one metis ran (${JSON.stringify(ran[edited]!.slice(0, 80))}): an edited message does not change the conversation metis sends to the model; send the history metis has, or ${NEW_CHAT}`,
  );
}

/** The texts of the newest user messages metis stored for the session (at most `count`), oldest first. */
async function storedUserTexts(
  conversations: ConversationReads,
  sessionId: string,
  count: number,
): Promise<string[]> {
  if (count === 0) return [];
  const texts = (await conversations.messages(sessionId, { limit: Math.min(count * 4, 1000) }))
    .filter((message) => message.role === 'user')
    .map((message) =>
      (message.content as { type: string; text?: string }[])
        .filter((block) => block.type === 'text')
        .map((block) => block.text ?? '')
        .join(''),
    );
  return texts.slice(-count);
}
