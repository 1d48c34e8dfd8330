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
  /** Base of the WebSocket URLs handed out by the attach handshake, e.g. `ws://127.0.0.1:8421`. */
  readonly wsBase: () => string;
  readonly extraRoutes?: (
    request: IncomingMessage,
    response: ServerResponse,
    path: string,
  ) => boolean | Promise<boolean>;
}

type Handler = (request: IncomingMessage, params: string[], url: URL) => Promise<[number, unknown]>;

/**
 * The HTTP API (docs/http-api.md): sessions, turns, cancel, history, confirmations, the sticky model
 * and health. Every body is validated; every failure is `{error: {code, message}}` with its status.
 */
export function createApi(context: ApiContext) {
  const { runtime, tokens, trace, faults } = context;
  const routes: [string, RegExp, Handler][] = [
    ['GET', /^\/healthz$/, async () => [200, { status: 'ok' }]],
    [
      'POST',
      /^\/sessions$/,
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
    ],
    ['GET', /^\/sessions$/, async () => [200, { sessions: runtime.sessions.listSessions() }]],
    [
      'GET',
      /^\/sessions\/([^/]+)$/,
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
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/turns$/,
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
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/turns\/([^/]+)\/cancel$/,
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
    ],
    [
      'GET',
      /^\/sessions\/([^/]+)\/messages$/,
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
    ],
    [
      'GET',
      /^\/sessions\/([^/]+)\/confirmations$/,
      async (_request, [id]) => [200, { confirmations: runtime.pendingConfirmations(id!) }],
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/confirmations\/([^/]+)$/,
      async (request, [id, requestId]) => {
        const body = validate(ConfirmBody, await readJson(request));
        runtime.confirm(id!, requestId!, body.decision, body.scope ?? 'once', null, body.input_hash);
        return [200, { confirmation_request_id: requestId, decision: body.decision }];
      },
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/feedback$/,
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
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/end$/,
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
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/route\/override$/,
      async (_request, [id]) => {
        assertStorageWritable(trace);
        return [200, runtime.overrideRoute(id!)];
      },
    ],
    [
      'POST',
      /^\/sessions\/([^/]+)\/route\/dismiss$/,
      async (_request, [id]) => {
        assertStorageWritable(trace);
        return [200, runtime.dismissRecommendation(id!)];
      },
    ],
    [
      'POST',
      /^\/patterns\/clear$/,
      async () => {
        assertStorageWritable(trace);
        return [200, runtime.clearPatterns()];
      },
    ],
    [
      'PUT',
      /^\/sessions\/([^/]+)\/model$/,
      async (request, [id]) => {
        const body = validate(ModelBody, await readJson(request));
        return [200, runtime.setStickyModel(id!, body.model)];
      },
    ],
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
      for (const [method, pattern, handler] of routes) {
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
