import type { ServerResponse } from 'node:http';
import { MetisError } from '../../../errors.js';
import { SYSTEM_SESSION_ID } from '../../../events/envelope.js';
import { HttpError, isClientSession, writeEventStreamHead } from '../../../http/http-util.js';
import { STORAGE_ERRORS } from '../../../http/openapi.js';
import { type RawRoute, rawRoute } from '../../../http/routes.js';
import type { SessionGate } from '../../../http/session-router.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { StoreContext } from '../../../store/store-context.js';
import { assertStorageWritable } from '../../commit-ack.js';
import type { ConnectionDeps } from '../../connection-deps.js';
import { storedToolResult } from '../../stored-conversation.js';
import { followQueuedTurn, streamMultitaskOf } from '../../turn-queue-stream.js';
import { followTurnFrom } from '../../turn-subscription.js';
import { SseData, TurnTransport } from '../../turn-transport.js';
import { AG_UI_EVENT_TYPES, type AgUiEvent, AgUiMapper, type AgUiRunContext } from './ag-ui-events.js';
import {
  type AgUiInput,
  clientToolsOf,
  lastUserText,
  RunAgentInput,
  speaksInterrupts,
} from './ag-ui-input.js';
import { type Continuation, continuationOf } from './ag-ui-resume.js';
import { sessionState } from './ag-ui-state.js';
import { agUiThread, agUiThreadOf, clientIdsOf, THREAD_MESSAGES } from './ag-ui-thread.js';

const AG_UI_ERRORS = ['METIS_ERR_TURN_IN_FLIGHT', 'METIS_ERR_SESSION_ENDED', ...STORAGE_ERRORS];
const AG_UI_STREAM = { kind: 'ag-ui', eventTypes: AG_UI_EVENT_TYPES } as const;

/**
 * `POST /ag-ui` (the thread is the metis session, created on first use) and `POST
 * /sessions/{id}/ag-ui` (an existing session; the thread id must name it): an AG-UI agent endpoint
 * (docs/ag-ui.md). The last user message of `RunAgentInput` starts a turn, answered as AG-UI events over
 * SSE on the subscription core of every stream (queue bound, heartbeat, slow-reader close:
 * turn-transport.ts); closing the request cancels the turn (`client_disconnect`). A run ends where the
 * turn waits for the client (an approval, a frontend tool's call); the run that brings the answer
 * (`resume`, the tool's message) continues the same turn. A run with no messages (a client loading a
 * thread, as CopilotKit does on mount) starts none and reports the thread as stored.
 */
export function agUiRoutes(
  runtime: Runtime,
  deps: () => ConnectionDeps,
  trace: StoreContext,
  /** In a cluster, this node must own the thread's session first (a path with the id is gated already). */
  sessionGate: SessionGate = async () => {},
): RawRoute[] {
  const report = async (input: AgUiInput, sessionId: string, response: ServerResponse) => {
    const stored = (await runtime.knowsSession(sessionId))
      ? agUiThreadOf(
          await trace.port.conversations.messages(sessionId, { limit: THREAD_MESSAGES }),
          clientIdsOf(input.messages),
        )
      : [];
    writeEventStreamHead(response);
    for (const event of threadReport(input.threadId, input.runId, stored))
      response.write(`data: ${JSON.stringify(event)}\n\n`);
    response.end();
  };
  const run = async (input: AgUiInput, perSession: string | null, response: ServerResponse) => {
    const sessionId = perSession ?? input.threadId;
    // The internal `system` session is no thread, on either route.
    if (
      sessionId === SYSTEM_SESSION_ID ||
      (perSession !== null && !(await isClientSession(runtime, sessionId)))
    )
      throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId} (unknown thread)`);
    if (perSession !== null && input.threadId !== sessionId)
      throw new HttpError(
        400,
        'METIS_ERR_INVALID_ARGUMENT',
        `threadId: "${input.threadId}" is not this session (${sessionId}); use POST /ag-ui for other threads`,
      );
    const answers = (input.resume?.length ?? 0) > 0 || input.messages.at(-1)?.role === 'tool';
    if (input.messages.length === 0 && !answers) {
      // In a cluster, the node that owns the thread has it as it is now (a run takes it over too).
      if (perSession === null) await sessionGate(sessionId);
      await report(input, sessionId, response);
      return;
    }
    assertStorageWritable(trace);
    if (perSession === null) await sessionGate(sessionId, true);
    // Read once, before the run's synchronous start: the mapper follows the routing events after it.
    const routedModel = await deps().lookups.lastRoutedModel(sessionId);
    const continuation = runtime.hasSession(sessionId) ? continuationOf(runtime, sessionId, input) : null;
    // Answers for a turn that is over (decided meanwhile, timed out): the thread as it ended.
    if (continuation === null && answers && input.messages.at(-1)?.role !== 'user') {
      await report(input, sessionId, response);
      return;
    }
    const text = continuation === null ? lastUserText(input.messages) : '';
    const clientTools = continuation === null ? clientToolsOf(input) : [];
    if (!runtime.hasSession(sessionId)) runtime.createSession({ sessionId });
    const data = new SseData();
    const context = runContext(runtime, routedModel, sessionId, input, continuation, clientTools);
    const mapper = new AgUiMapper(data.write, context);
    const transport = new TurnTransport(response, AG_UI_STREAM, mapper, data, sessionId);
    const start = (): string => {
      if (continuation === null) return runtime.submitTurn(sessionId, text, { clientTools }).turnId;
      continuation.answer();
      return continuation.turnId;
    };
    // A run sent while the thread's turn runs (forwardedProps.multitask; issue 31): it waits for its turn.
    const multitask = streamMultitaskOf(forwardedMultitask(input), 'forwardedProps.multitask');
    if (continuation === null && multitask !== 'reject' && runtime.currentTurn(sessionId) !== null)
      return followQueuedTurn(deps(), transport, sessionId, text, multitask, () => mapper.start());
    followTurnFrom(deps(), transport, sessionId, start, () => mapper.start());
  };
  const success = {
    status: 200,
    description: 'AG-UI events over SSE',
    contentType: 'text/event-stream',
    frames: 'AgUiEvent',
  };
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

function forwardedMultitask(input: AgUiInput): unknown {
  const forwarded = (input as { forwardedProps?: unknown }).forwardedProps;
  return typeof forwarded === 'object' && forwarded !== null
    ? (forwarded as { multitask?: unknown }).multitask
    : undefined;
}

/** What the mapper reads of the run and the thread. */
function runContext(
  runtime: Runtime,
  /** The session's last routed model as stored when the run began. */
  routedModel: string | null,
  sessionId: string,
  input: AgUiInput,
  continuation: Continuation | null,
  clientTools: readonly { name: string }[],
): AgUiRunContext {
  const clientIds = clientIdsOf(input.messages);
  return {
    threadId: input.threadId,
    runId: input.runId,
    toolResult: (toolUseId) => {
      const result = storedToolResult(runtime, sessionId, toolUseId);
      return result === null ? '' : result.isError ? `error: ${result.text}` : result.text;
    },
    thread: () => agUiThread(runtime, sessionId, clientIds),
    state: () => sessionState(runtime, routedModel, sessionId),
    clientTools: continuation?.clientTools ?? new Set(clientTools.map((tool) => tool.name)),
    answered: continuation?.answered ?? new Set(),
    batch: continuation?.batch,
    interrupts: speaksInterrupts(input),
  };
}

/**
 * The AG-UI run that starts no turn (a `RunAgentInput` with no messages): it reports the thread as
 * stored, in the order the client's verifier expects of any run.
 */
function threadReport(threadId: string, runId: string, messages: unknown[]): AgUiEvent[] {
  return [
    { type: 'RUN_STARTED', threadId, runId },
    { type: 'MESSAGES_SNAPSHOT', messages },
    { type: 'RUN_FINISHED', threadId, runId },
  ];
}
