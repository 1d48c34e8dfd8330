import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { MetisError } from '../../../errors.js';
import { SYSTEM_SESSION_ID } from '../../../events/envelope.js';
import { HttpError, isClientSession, writeEventStreamHead } from '../../../http/http-util.js';
import { STORAGE_ERRORS } from '../../../http/openapi.js';
import { type RawRoute, rawRoute } from '../../../http/routes.js';
import type { SessionGate } from '../../../http/session-router.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { TraceContext } from '../../../store/trace-context.js';
import { ClientSessionId } from '../../client-session-id.js';
import { assertStorageWritable } from '../../commit-ack.js';
import type { ConnectionDeps } from '../../connection-deps.js';
import { agUiMessages, storedToolResult } from '../../stored-conversation.js';
import { followTurn } from '../../turn-subscription.js';
import { SseData, TurnTransport } from '../../turn-transport.js';
import { AG_UI_EVENT_TYPES, AgUiMapper, threadReport } from './ag-ui-events.js';

/** AG-UI's `RunAgentInput` (`@ag-ui/core` 1.0); fields metis does not use are let through. */
const RunAgentInput = z.looseObject({
  threadId: ClientSessionId,
  runId: z.string().min(1).max(200),
  messages: z
    .array(
      z.looseObject({
        id: z.string(),
        role: z.enum(['user', 'assistant', 'system', 'developer', 'tool', 'reasoning', 'activity']),
        content: z.unknown().optional(),
      }),
    )
    .describe(
      'Empty: a run that starts no turn and reports the thread as stored (MESSAGES_SNAPSHOT), as a client ' +
        'loading a thread sends. Otherwise the last message must be a user message with text content: it starts the turn.',
    ),
  tools: z.array(z.unknown()).default([]),
  context: z.array(z.unknown()).default([]),
});

type AgUiInput = z.output<typeof RunAgentInput>;

const AG_UI_ERRORS = ['METIS_ERR_TURN_IN_FLIGHT', 'METIS_ERR_SESSION_ENDED', ...STORAGE_ERRORS];
const AG_UI_STREAM = { kind: 'ag-ui', eventTypes: AG_UI_EVENT_TYPES } as const;

/**
 * `POST /ag-ui` (the thread is the metis session, created on first use) and `POST
 * /sessions/{id}/ag-ui` (an existing session; the thread id must name it): an AG-UI agent endpoint
 * (docs/ag-ui.md). The last user message of `RunAgentInput` starts a turn, answered as AG-UI events over
 * SSE on the subscription core of every stream (queue bound, heartbeat, slow-reader close:
 * turn-transport.ts); closing the request cancels the turn (`client_disconnect`). A run with no
 * messages (a client loading a thread, as CopilotKit does on mount) starts none and reports the thread
 * as stored.
 */
export function agUiRoutes(
  runtime: Runtime,
  deps: () => ConnectionDeps,
  trace: TraceContext,
  /** In a cluster, this node must own the thread's session first (a path with the id is gated already). */
  sessionGate: SessionGate = async () => {},
): RawRoute[] {
  const run = async (input: AgUiInput, perSession: string | null, response: ServerResponse) => {
    const sessionId = perSession ?? input.threadId;
    // The internal `system` session is no thread, on either route.
    if (sessionId === SYSTEM_SESSION_ID || (perSession !== null && !isClientSession(runtime, sessionId)))
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId} (unknown thread)`);
    if (perSession !== null && input.threadId !== sessionId)
      throw new HttpError(
        400,
        'METIS_ERR_INVALID_ARGUMENT',
        `threadId: "${input.threadId}" is not this session (${sessionId}); use POST /ag-ui for other threads`,
      );
    if (input.messages.length === 0) {
      // In a cluster, the node that owns the thread has it as it is now (a run takes it over too).
      if (perSession === null) await sessionGate(sessionId);
      const stored = runtime.hasSession(sessionId) ? agUiMessages(runtime, sessionId) : [];
      writeEventStreamHead(response);
      for (const event of threadReport(input.threadId, input.runId, stored))
        response.write(`data: ${JSON.stringify(event)}\n\n`);
      response.end();
      return;
    }
    const text = lastUserText(input.messages);
    assertStorageWritable(trace);
    if (perSession === null) await sessionGate(sessionId, true);
    if (!runtime.hasSession(sessionId)) runtime.createSession({ sessionId });
    const data = new SseData();
    const mapper = new AgUiMapper(
      data.write,
      input.threadId,
      input.runId,
      (toolUseId) => {
        const result = storedToolResult(runtime, sessionId, toolUseId);
        return result === null ? '' : result.isError ? `error: ${result.text}` : result.text;
      },
      () => agUiMessages(runtime, sessionId),
    );
    const transport = new TurnTransport(response, AG_UI_STREAM, mapper, data, sessionId);
    followTurn(deps(), transport, sessionId, text, () => mapper.start());
  };
  const success = { status: 200, description: 'AG-UI events over SSE', contentType: 'text/event-stream' };
  return [
    rawRoute(
      {
        method: 'POST',
        path: '/ag-ui',
        summary: 'An AG-UI run (RunAgentInput): the thread is the session, created on first use',
        body: RunAgentInput,
        success,
        errors: AG_UI_ERRORS,
      },
      ({ body }, response) => run(body, null, response),
    ),
    rawRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/ag-ui',
        summary: 'An AG-UI run in an existing session (threadId must name it)',
        // A streamed answer cannot travel back as one: the refusal names the node running the session.
        placement: 'owner-only',
        body: RunAgentInput,
        success,
        errors: ['METIS_ERR_SESSION_NOT_FOUND', ...AG_UI_ERRORS],
      },
      ({ params: [sessionId], body }, response) => run(body, sessionId!, response),
    ),
  ];
}

/** The text of the last message, which must be the user's: what the run is asked. */
function lastUserText(messages: z.output<typeof RunAgentInput>['messages']): string {
  const last = messages.at(-1);
  const content = last?.content;
  const text =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? content
            .filter(
              (part): part is { type: 'text'; text: string } =>
                part?.type === 'text' && typeof part.text === 'string',
            )
            .map((part) => part.text)
            .join('')
        : '';
  if (last?.role !== 'user' || text.trim() === '')
    throw new HttpError(
      400,
      'METIS_ERR_INVALID_ARGUMENT',
      'messages: the last message must be a user message with text content (it starts the run)',
    );
  return text;
}
