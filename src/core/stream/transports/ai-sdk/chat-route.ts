import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { isMetisError, MetisError } from '../../../errors.js';
import { HttpError, isClientSession } from '../../../http/http-util.js';
import { STORAGE_ERRORS } from '../../../http/openapi.js';
import { type RawRoute, rawRoute } from '../../../http/routes.js';
import type { SessionGate } from '../../../http/session-router.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { StoreContext } from '../../../store/store-context.js';
import { ClientSessionId } from '../../client-session-id.js';
import { assertStorageWritable } from '../../commit-ack.js';
import type { ConnectionDeps } from '../../connection-deps.js';
import { storedToolResult } from '../../stored-conversation.js';
import { followQueuedTurn, streamMultitaskOf } from '../../turn-queue-stream.js';
import { followTurn, followTurnFrom, rejoinTurn } from '../../turn-subscription.js';
import { SseData, TurnTransport } from '../../turn-transport.js';
import {
  type ApprovalAnswer,
  answeredApprovals,
  assertSameHistory,
  ChatMessage,
  refuseRegenerate,
  textOf,
} from './chat-history.js';
import { UI_MESSAGE_EVENT_TYPES, UiMessageStreamMapper } from './ui-message-stream.js';

/** What `useChat`'s default transport posts (ai 6 `HttpChatTransport`); other fields are let through. */
const ChatBody = z.looseObject({
  id: ClientSessionId,
  messages: z.array(ChatMessage).min(1),
  trigger: z.enum(['submit-message', 'regenerate-message']).optional(),
});

const UI_MESSAGE_STREAM = {
  kind: 'ai-sdk',
  eventTypes: UI_MESSAGE_EVENT_TYPES,
  headers: { 'x-vercel-ai-ui-message-stream': 'v1' },
} as const;

/**
 * `POST /api/chat`: the AI SDK's UI message stream (docs/ai-sdk.md), so that `useChat` can use metis as
 * its backend unchanged. The chat id is the metis session (created on first use); the last user message
 * starts a turn (metis keeps the conversation itself, so earlier messages are not replayed, and must be
 * the ones it ran: a history edited, cleared or regenerated in the UI is a 409); the answer is that turn
 * as UI message chunks over SSE, ending with `[DONE]`, on the subscription core of every stream (queue
 * bound, heartbeat, slow-reader close: turn-transport.ts). The stream ends at an approval request; the
 * request that carries the UI's answer (`addToolApprovalResponse`) applies it and streams the rest of
 * the turn. Closing the request cancels the turn (`client_disconnect`). `GET /api/chat/{id}/stream`
 * resumes the turn in flight.
 */
export function chatRoutes(
  runtime: Runtime,
  deps: () => ConnectionDeps,
  trace: StoreContext,
  /** In a cluster, this node must own the chat's session first. */
  sessionGate: SessionGate = async () => {},
): RawRoute[] {
  const chat = rawRoute(
    {
      method: 'POST',
      path: '/api/chat',
      summary:
        "The AI SDK's UI message stream (useChat): the chat id is the session, the last user message a turn",
      body: ChatBody,
      success: {
        status: 200,
        description: 'UI message chunks over SSE, then [DONE]',
        contentType: 'text/event-stream',
        frames: 'UiMessageChunk',
      },
      errors: [
        'METIS_ERR_TURN_IN_FLIGHT',
        'METIS_ERR_CHAT_HISTORY_DIVERGED',
        'METIS_ERR_CONFIRMATION_NOT_FOUND',
        'METIS_ERR_SESSION_ENDED',
        ...STORAGE_ERRORS,
      ],
    },
    async ({ body }, response) => {
      const last = body.messages.at(-1)!;
      const answers = last.role === 'assistant' ? answeredApprovals(last) : [];
      const text = last.role === 'user' ? textOf(last) : '';
      if (answers.length === 0 && text.trim() === '')
        throw new HttpError(
          400,
          'METIS_ERR_INVALID_ARGUMENT',
          'messages: the last message must be a user message with a text part, or the assistant message with the approvals answered in it',
        );
      assertStorageWritable(trace);
      await sessionGate(body.id, true);
      if (body.trigger === 'regenerate-message') refuseRegenerate();
      // Every user message before the new one; an approval's answer comes after its turn's message.
      const earlier = answers.length > 0 ? body.messages : body.messages.slice(0, -1);
      await assertSameHistory(
        runtime,
        trace.port.conversations,
        body.id,
        earlier.filter((message) => message.role === 'user').map(textOf),
      );
      if (!runtime.hasSession(body.id)) runtime.createSession({ sessionId: body.id });
      const { transport, mapper } = uiMessageStream(runtime, body.id, response);
      const onStart = (turnId: string) => mapper.start(turnId);
      // A message sent while the chat's turn runs (the request's `multitask`; issue 31) waits for its turn.
      const multitask = streamMultitaskOf(body.multitask, 'multitask');
      if (answers.length === 0 && multitask !== 'reject' && runtime.currentTurn(body.id) !== null)
        return followQueuedTurn(deps(), transport, body.id, text, multitask, onStart);
      if (answers.length === 0) followTurn(deps(), transport, body.id, text, onStart);
      else followTurnFrom(deps(), transport, body.id, () => applyAnswers(runtime, body.id, answers), onStart);
    },
  );
  const resume = rawRoute(
    {
      method: 'GET',
      path: '/api/chat/{chat_id}/stream',
      summary: "The AI SDK transport's reconnect: the chat's turn in flight from its start, or 204",
      success: {
        status: 200,
        description: 'the turn as UI message chunks over SSE, then [DONE]; 204 when no turn is running',
        contentType: 'text/event-stream',
        frames: 'UiMessageChunk',
      },
      errors: [],
    },
    async ({ params: [chatId] }, response) => {
      const turn = (await isClientSession(runtime, chatId!)) ? runtime.currentTurn(chatId!) : null;
      // Nothing running: the transport has nothing to reconnect to (ai 6: 204).
      if (turn === null) return void response.writeHead(204).end();
      const { transport, mapper } = uiMessageStream(runtime, chatId!, response);
      await rejoinTurn(deps(), transport, chatId!, turn.turnId, (turnId) => mapper.start(turnId));
    },
  );
  return [chat, resume];
}

/**
 * Applies the UI's answers to the confirmations the chat's turn waits for, and names that turn: the
 * request that carries them goes on with it. Answers already applied (an earlier request, metis's own
 * confirmation route) are passed over; with none left to apply, nothing is streamed (404).
 */
function applyAnswers(runtime: Runtime, chatId: string, answers: readonly ApprovalAnswer[]): string {
  const turn = runtime.currentTurn(chatId);
  const waiting = new Set(
    runtime.pendingConfirmations(chatId).map((request) => request.confirmation_request_id),
  );
  const toApply = answers.filter((answer) => waiting.has(answer.approvalId));
  let applied = 0;
  let refused: unknown = null;
  for (const answer of toApply) {
    const decision = answer.approved ? 'allow' : 'deny';
    try {
      runtime.confirm(chatId, answer.approvalId, decision, 'once', null, undefined, answer.reason);
      applied += 1;
    } catch (error) {
      // Answered or timed out since it was listed: the others may still be applied.
      if (!isMetisError(error)) throw error;
      refused = error;
    }
  }
  if (turn !== null && applied > 0) return turn.turnId;
  if (refused !== null) throw refused;
  throw new MetisError(
    'METIS_ERR_CONFIRMATION_NOT_FOUND',
    `no confirmation of chat ${chatId} waits for ${answers.map((a) => a.approvalId).join(', ')}: answered elsewhere, timed out or never asked; GET /api/chat/${chatId}/stream shows the turn while it runs`,
  );
}

/** A chat's turn as the UI message stream, on the transport of a turn's own stream. */
function uiMessageStream(runtime: Runtime, sessionId: string, response: ServerResponse) {
  const data = new SseData();
  const mapper = new UiMessageStreamMapper(
    data.write,
    (toolUseId) => toolOutputOf(runtime, sessionId, toolUseId),
    (approvalId) =>
      runtime
        .pendingConfirmations(sessionId)
        .some((request) => request.confirmation_request_id === approvalId),
  );
  return { mapper, transport: new TurnTransport(response, UI_MESSAGE_STREAM, mapper, data, sessionId) };
}

/**
 * The tool's result as the model got it: the text of its `tool_result`, JSON when it parses. Before the
 * turn stores the results of a step (a stream that stops at a later tool's approval), the tool call's
 * own record has that text.
 */
function toolOutputOf(runtime: Runtime, sessionId: string, toolUseId: string): unknown {
  const stored = storedToolResult(runtime, sessionId, toolUseId)?.text;
  const text = stored ?? runtime.sessions.toolCall(toolUseId, sessionId)?.output;
  if (typeof text !== 'string') return text ?? null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
