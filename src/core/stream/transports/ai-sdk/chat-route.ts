import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { HttpError, isClientSession } from '../../../http/http-util.js';
import { STORAGE_ERRORS } from '../../../http/openapi.js';
import { type RawRoute, rawRoute } from '../../../http/routes.js';
import type { SessionGate } from '../../../http/session-router.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { TraceContext } from '../../../store/trace-context.js';
import { ClientSessionId } from '../../client-session-id.js';
import { assertStorageWritable } from '../../commit-ack.js';
import type { ConnectionDeps } from '../../connection-deps.js';
import { storedToolResult } from '../../stored-conversation.js';
import { followTurn, rejoinTurn } from '../../turn-subscription.js';
import { SseData, TurnTransport } from '../../turn-transport.js';
import { UI_MESSAGE_EVENT_TYPES, UiMessageStreamMapper } from './ui-message-stream.js';

/** What `useChat`'s default transport posts (ai 6 `HttpChatTransport`); other fields are let through. */
const ChatBody = z.looseObject({
  id: ClientSessionId,
  messages: z
    .array(
      z.looseObject({
        role: z.enum(['system', 'user', 'assistant']),
        parts: z.array(z.looseObject({ type: z.string(), text: z.string().optional() })),
      }),
    )
    .min(1),
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
 * starts a turn (metis keeps the conversation itself, so earlier messages in the body are not replayed);
 * the answer is that turn as UI message chunks over SSE, ending with `[DONE]`, on the subscription core
 * of every stream (queue bound, heartbeat, slow-reader close: turn-transport.ts). Closing the request
 * cancels the turn (`client_disconnect`). `GET /api/chat/{id}/stream` resumes the turn in flight.
 */
export function chatRoutes(
  runtime: Runtime,
  deps: () => ConnectionDeps,
  trace: TraceContext,
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
      },
      errors: ['METIS_ERR_TURN_IN_FLIGHT', 'METIS_ERR_SESSION_ENDED', ...STORAGE_ERRORS],
    },
    async ({ body }, response) => {
      const last = body.messages.at(-1)!;
      const text = last.parts
        .filter((part) => part.type === 'text')
        .map((part) => part.text ?? '')
        .join('');
      if (last.role !== 'user' || text.trim() === '')
        throw new HttpError(
          400,
          'METIS_ERR_INVALID_ARGUMENT',
          'messages: the last message must be a user message with a text part',
        );
      assertStorageWritable(trace);
      await sessionGate(body.id, true);
      if (!runtime.hasSession(body.id)) runtime.createSession({ sessionId: body.id });
      const { transport, mapper } = uiMessageStream(runtime, body.id, response);
      followTurn(deps(), transport, body.id, text, (turnId) => mapper.start(turnId));
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
      },
      errors: [],
    },
    async ({ params: [chatId] }, response) => {
      const turn = isClientSession(runtime, chatId!) ? runtime.currentTurn(chatId!) : null;
      // Nothing running: the transport has nothing to reconnect to (ai 6: 204).
      if (turn === null) return void response.writeHead(204).end();
      const { transport, mapper } = uiMessageStream(runtime, chatId!, response);
      rejoinTurn(deps(), transport, chatId!, turn.turnId, (turnId) => mapper.start(turnId));
    },
  );
  return [chat, resume];
}

/** A chat's turn as the UI message stream, on the transport of a turn's own stream. */
function uiMessageStream(runtime: Runtime, sessionId: string, response: ServerResponse) {
  const data = new SseData();
  const mapper = new UiMessageStreamMapper(data.write, (toolUseId) =>
    toolOutputOf(runtime, sessionId, toolUseId),
  );
  return { mapper, transport: new TurnTransport(response, UI_MESSAGE_STREAM, mapper, data, sessionId) };
}

/** The tool's result as the model got it: the text of its `tool_result`, JSON when it parses. */
function toolOutputOf(runtime: Runtime, sessionId: string, toolUseId: string): unknown {
  const result = storedToolResult(runtime, sessionId, toolUseId);
  if (result === null) return null;
  try {
    return JSON.parse(result.text);
  } catch {
    return result.text;
  }
}
