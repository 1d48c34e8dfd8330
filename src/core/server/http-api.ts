import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { isMetisError, MetisError } from '../errors.js';
import { recordExplicitFeedback } from '../runtime/explicit-feedback.js';
import type { Runtime } from '../runtime/runtime.js';
import { CANCEL_REASONS } from '../runtime/turn-runner.js';
import { asStorageError } from '../store/storage-errors.js';
import type { TraceContext } from '../store/trace-context.js';
import type { AttachTokens } from './attach-tokens.js';
import { assertStorageWritable, emittedDuring, untilCommitted } from './commit-ack.js';
import type { FaultSwitches } from './faults.js';
import { HttpError, readJson, sendError, sendJson, sendMethodNotAllowed, validate } from './http-util.js';
import { openApiDocument, pathPattern, type RouteDoc, STORAGE_ERRORS } from './openapi.js';

const modelId = z.string().regex(/^[a-z0-9-]+:\S+$/, 'must be "provider:name", e.g. scripted:demo');

const CreateSessionBody = z.strictObject({
  workspace_path: z.string().min(1).optional(),
  model: modelId.optional(),
});
const SubmitTurnBody = z.strictObject({ message: z.string().min(1).max(200_000), model: modelId.optional() });
const CancelBody = z.strictObject({
  reason: z.enum(CANCEL_REASONS).optional(),
});
const ConfirmBody = z.strictObject({
  decision: z.enum(['allow', 'deny']),
  scope: z.enum(['once', 'session']).optional(),
  /** The `input_hash` of the input the user was shown (the listing's); a different one decides nothing. */
  input_hash: z
    .string()
    .regex(/^[0-9a-f]{64}$/, 'must be the sha256 hex of the input, as the listing gives it')
    .optional(),
});
const ModelBody = z.strictObject({ model: modelId });
const FeedbackBody = z.strictObject({
  rating: z.enum(['thumbs_up', 'thumbs_down']),
  turn_id: z.string().min(1).optional(),
  comment: z.string().min(1).max(4_000).optional(),
});
const EndBody = z.strictObject({ disposition: z.enum(['completed', 'abandoned']).optional() });
const MessagesQuery = z.strictObject({
  before: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

export interface ApiContext {
  readonly runtime: Runtime;
  /** The runtime's trace store: a 201/202 is answered only once its first event is committed there. */
  readonly trace: TraceContext;
  /** Bound of that wait (default 5 s); storage that does not come back by then answers 503/507. */
  readonly commitWaitMs?: number;
  readonly tokens: AttachTokens;
  /** `metis serve --conformance --fault …`: guarantees broken on purpose (faults.ts). */
  readonly faults?: FaultSwitches;
  /** Routes served outside this table (streams, /metrics), for `GET /openapi.json`. */
  readonly extraDocs?: readonly RouteDoc[];
  /** metis's version, for `GET /openapi.json`. */
  readonly version?: string;
  /** Base of the WebSocket URLs handed out by the attach handshake, e.g. `ws://127.0.0.1:8421`. */
  readonly wsBase: () => string;
  readonly extraRoutes?: (
    request: IncomingMessage,
    response: ServerResponse,
    path: string,
  ) => boolean | Promise<boolean>;
}

type Handler = (request: IncomingMessage, params: string[], url: URL) => Promise<[number, unknown]>;

/** A route: what it declares (its docs, the schemas its handler validates with) and its handler. */
interface ApiRoute extends RouteDoc {
  readonly pattern: RegExp;
  readonly handler: Handler;
}

function route(doc: RouteDoc, handler: Handler): ApiRoute {
  return { ...doc, pattern: pathPattern(doc.path), handler };
}

/**
 * The HTTP API (docs/http-api.md): sessions, turns, cancel, history, confirmations, the sticky model
 * and health. Every body is validated; every failure is `{error: {code, message}}` with its status.
 */
export function createApi(context: ApiContext) {
  const { runtime, tokens, trace, faults } = context;
  const routes: ApiRoute[] = [
    route(
      {
        method: 'GET',
        path: '/healthz',
        summary: 'Liveness',
        open: true,
        success: { status: 200, description: '{status: ok}' },
        errors: [],
      },
      async () => [200, { status: 'ok' }],
    ),
    route(
      {
        method: 'POST',
        path: '/sessions',
        summary: 'Create a session',
        body: CreateSessionBody,
        success: { status: 201, description: 'the session, once session.created is stored' },
        errors: ['METIS_ERR_INVALID_MODEL', ...STORAGE_ERRORS],
      },
      async (request) => {
        const body = validate(CreateSessionBody, await readJson(request));
        assertStorageWritable(trace);
        const { result: session, event } = emittedDuring(
          trace,
          (e) => e.type === 'session.created',
          () => runtime.createSession({ workspacePath: body.workspace_path, model: body.model ?? null }),
        );
        try {
          await untilCommitted(trace, event, context.commitWaitMs);
        } catch (error) {
          // The client never learns this id: end the session so it is not left open for ever.
          runtime.endSession(session.id, 'abandoned');
          throw error;
        }
        return [201, { session_id: session.id, ...session }];
      },
    ),
    route(
      {
        method: 'GET',
        path: '/sessions',
        summary: 'Sessions, newest first',
        success: { status: 200, description: 'sessions' },
        errors: [],
      },
      async () => [200, { sessions: runtime.sessions.listSessions() }],
    ),
    route(
      {
        method: 'GET',
        path: '/openapi.json',
        summary: 'This description, generated from the route declarations',
        success: { status: 200, description: 'OpenAPI 3.1' },
        errors: [],
      },
      async () => [
        200,
        openApiDocument([...routes, ...(context.extraDocs ?? [])], context.version ?? '0.0.0'),
      ],
    ),
    route(
      {
        method: 'GET',
        path: '/sessions/{session_id}',
        summary: 'Attach handshake: the session and a single-use WebSocket URL',
        success: { status: 200, description: 'session, attach_token, ws_url' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async (_request, [id]) => {
        const session = runtime.getSession(id!);
        const token = tokens.issue(session.id);
        return [
          200,
          {
            session_id: session.id,
            active_model: session.active_model,
            attach_token: token,
            ws_url: `${context.wsBase()}/sessions/${encodeURIComponent(session.id)}/stream?attach=${token}`,
            session,
          },
        ];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/turns',
        summary: 'Submit a user message: starts a turn',
        body: SubmitTurnBody,
        success: { status: 202, description: 'turn_id, once turn.started is stored' },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_SESSION_ENDED',
          'METIS_ERR_TURN_IN_FLIGHT',
          'METIS_ERR_INVALID_MODEL',
          ...STORAGE_ERRORS,
        ],
      },
      async (request, [id]) => {
        const body = validate(SubmitTurnBody, await readJson(request));
        assertStorageWritable(trace);
        const { result, event } = emittedDuring(
          trace,
          (e) => e.type === 'turn.started' && e.session_id === id,
          () => runtime.submitTurn(id!, body.message, { model: body.model ?? null }),
        );
        try {
          await untilCommitted(trace, event, context.commitWaitMs);
        } catch (error) {
          // Not acknowledged, so not run: the turn ends as cancelled once storage takes its events.
          if (runtime.currentTurn(id!)?.turnId === result.turnId)
            runtime.cancelTurn(id!, result.turnId, 'timeout');
          throw error;
        }
        return [202, { turn_id: result.turnId }];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/turns/{turn_id}/cancel',
        summary: 'Cancel a turn (idempotent)',
        body: CancelBody,
        success: {
          status: 202,
          description: 'turn_id and status: cancelling, already_cancelling or already_ended',
        },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_TURN_NOT_FOUND'],
      },
      async (request, [id, turnId]) => {
        const body = validate(CancelBody, await readJson(request));
        const status = runtime.cancelTurn(id!, turnId!, body.reason ?? 'user_cancel');
        // The old behaviour, for the conformance suite to catch: an ended turn as not found.
        if (status === 'already_ended' && faults?.cancelEndedNotFound)
          throw new MetisError(
            'METIS_ERR_TURN_NOT_FOUND',
            `turn ${turnId} is not in flight in session ${id}`,
          );
        return [202, { turn_id: turnId, status }];
      },
    ),
    route(
      {
        method: 'GET',
        path: '/sessions/{session_id}/messages',
        summary: 'A page of the conversation, newest last',
        query: MessagesQuery,
        success: { status: 200, description: 'messages and has_more' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async (_request, [id], url) => {
        runtime.getSession(id!);
        const query = validate(MessagesQuery, Object.fromEntries(url.searchParams), 'query');
        // A cursor that names no message of this session would page from the newest, silently.
        if (query.before !== undefined && !runtime.sessions.hasMessage(id!, query.before)) {
          throw new MetisError(
            'METIS_ERR_INVALID_ARGUMENT',
            `before: ${query.before} is not a message of session ${id}`,
          );
        }
        const messages = runtime.sessions.messages(id!, {
          beforeId: query.before ?? null,
          limit: query.limit,
        });
        return [200, { messages, has_more: messages.length === query.limit }];
      },
    ),
    route(
      {
        method: 'GET',
        path: '/sessions/{session_id}/confirmations',
        summary: 'Tool calls waiting for approval, here and in the workers below',
        success: { status: 200, description: 'confirmations' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async (_request, [id]) => [200, { confirmations: runtime.pendingConfirmations(id!) }],
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/confirmations/{confirmation_request_id}',
        summary: 'Allow or deny a tool call',
        body: ConfirmBody,
        success: { status: 200, description: 'the decision taken' },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_CONFIRMATION_NOT_FOUND',
          'METIS_ERR_CONFIRMATION_MISMATCH',
        ],
      },
      async (request, [id, requestId]) => {
        const body = validate(ConfirmBody, await readJson(request));
        runtime.confirm(id!, requestId!, body.decision, body.scope ?? 'once', null, body.input_hash);
        return [200, { confirmation_request_id: requestId, decision: body.decision }];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/feedback',
        summary: 'Rate a turn or the session (feedback.explicit)',
        body: FeedbackBody,
        success: { status: 201, description: 'event_id, scope, rating' },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_TURN_NOT_FOUND',
          'METIS_ERR_TURN_IN_FLIGHT',
          ...STORAGE_ERRORS,
        ],
      },
      async (request, [id]) => {
        const body = validate(FeedbackBody, await readJson(request));
        runtime.getSession(id!);
        assertStorageWritable(trace);
        // The rated turn's end may still wait for its commit: let it land before looking it up.
        await untilCommitted(trace, null, context.commitWaitMs);
        const event = recordExplicitFeedback(trace.bus, trace.db, {
          sessionId: id!,
          rating: body.rating,
          turnId: body.turn_id ?? null,
          comment: body.comment ?? null,
        });
        await untilCommitted(trace, event, context.commitWaitMs);
        return [201, { event_id: event.id, scope: event.payload.scope, rating: body.rating }];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/end',
        summary: 'End the session (session.ended); it is then scored',
        body: EndBody,
        success: { status: 200, description: 'session_id, status, disposition' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_TURN_IN_FLIGHT', ...STORAGE_ERRORS],
      },
      async (request, [id]) => {
        const body = validate(EndBody, await readJson(request));
        assertStorageWritable(trace);
        const session = runtime.getSession(id!);
        if (session.current_turn_id !== null)
          throw new MetisError(
            'METIS_ERR_TURN_IN_FLIGHT',
            `session ${id} has turn ${session.current_turn_id} in flight: cancel it or wait for it to end`,
          );
        const disposition = body.disposition ?? 'completed';
        const { event } = emittedDuring(
          trace,
          (e) => e.type === 'session.ended' && e.session_id === id,
          () => runtime.endSession(id!, disposition),
        );
        await untilCommitted(trace, event, context.commitWaitMs);
        // Ended before: the disposition it ended with, once stored.
        const stored =
          event?.payload.disposition ?? runtime.sessions.getSession(id!)?.disposition ?? disposition;
        return [200, { session_id: id, status: 'ended', disposition: stored }];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/route/override',
        summary: 'Apply the deferred pattern recommendation to the running turn',
        success: { status: 200, description: 'turn_id, original_chosen_model, new_chosen_model' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_NO_RECOMMENDATION', ...STORAGE_ERRORS],
      },
      async (_request, [id]) => {
        assertStorageWritable(trace);
        return [200, runtime.overrideRoute(id!)];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/sessions/{session_id}/route/dismiss',
        summary: 'Dismiss the pending pattern recommendation',
        success: { status: 200, description: 'turn_id, chosen_model, dismissed_pattern_model' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_NO_RECOMMENDATION', ...STORAGE_ERRORS],
      },
      async (_request, [id]) => {
        assertStorageWritable(trace);
        return [200, runtime.dismissRecommendation(id!)];
      },
    ),
    route(
      {
        method: 'POST',
        path: '/patterns/clear',
        summary: 'Forget every learned pattern outcome',
        success: { status: 200, description: 'entries_evicted' },
        errors: ['METIS_ERR_INVALID_ARGUMENT', ...STORAGE_ERRORS],
      },
      async () => {
        assertStorageWritable(trace);
        return [200, runtime.clearPatterns()];
      },
    ),
    route(
      {
        method: 'PUT',
        path: '/sessions/{session_id}/model',
        summary: "Set the session's model (manual_sticky)",
        body: ModelBody,
        success: { status: 200, description: 'the session' },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_INVALID_MODEL'],
      },
      async (request, [id]) => {
        const body = validate(ModelBody, await readJson(request));
        return [200, runtime.setStickyModel(id!, body.model)];
      },
    ),
  ];

  return async function handleApi(request: IncomingMessage, response: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(request.url ?? '/', 'http://localhost');
    } catch {
      sendError(response, 400, 'METIS_ERR_INVALID_ARGUMENT', 'the request target is not a valid URL');
      return;
    }
    const path = url.pathname;
    try {
      if (await context.extraRoutes?.(request, response, path)) return;
      const allowed: string[] = [];
      for (const { method, pattern, handler } of routes) {
        const match = pattern.exec(path);
        if (!match) continue;
        allowed.push(method);
        if (method !== request.method) continue;
        let params: string[];
        try {
          params = match.slice(1).map((p) => decodeURIComponent(p));
        } catch {
          sendError(response, 400, 'METIS_ERR_INVALID_ARGUMENT', 'path: malformed percent-encoding');
          return;
        }
        const [status, body] = await handler(request, params, url);
        sendJson(response, status, body);
        return;
      }
      if (allowed.length > 0) sendMethodNotAllowed(response, request.method, path, allowed);
      else sendError(response, 404, 'METIS_ERR_NOT_FOUND', `no route ${path}`);
    } catch (error) {
      if (error instanceof HttpError) return sendError(response, error.status, error.code, error.message);
      // A read that met a full disk or an I/O error is a storage failure, not a metis bug.
      const mapped = asStorageError(error, trace.dbPath);
      if (isMetisError(mapped)) return sendError(response, mapped.status, mapped.code, mapped.message);
      sendError(response, 500, 'METIS_ERR_INTERNAL', 'internal error');
      throw error;
    }
  };
}
