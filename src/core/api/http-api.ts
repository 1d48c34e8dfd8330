import type { IncomingMessage } from 'node:http';
import { z } from 'zod';
import { MetisError } from '../errors.js';
import { newId } from '../events/ids.js';
import type { AttachTokens } from '../http/attach-tokens.js';
import { OpenApiDocumentSchema, openApiDocument, type RouteDoc, STORAGE_ERRORS } from '../http/openapi.js';
import { jsonRoute, type Route } from '../http/routes.js';
import type { SessionGate } from '../http/session-router.js';
import { recordExplicitFeedback } from '../runtime/explicit-feedback.js';
import type { Runtime } from '../runtime/runtime.js';
import { CANCEL_REASONS } from '../runtime/turn-state.js';
import type { SessionLister } from '../store/session-search.js';
import type { StoreContext } from '../store/store-context.js';
import { assertStorageWritable, emittedDuring, untilCommitted } from '../stream/commit-ack.js';
import type { FaultSwitches } from '../stream/faults.js';
import { BudgetBody, endPausedTurns, withBudget } from './budget-routes.js';
import { SubmitTurnBody, SubmittedAnswer, submitTurn } from './queue-routes.js';
import {
  AttachAnswer,
  CancelAnswer,
  ConfirmationsAnswer,
  CreatedSessionAnswer,
  DecisionAnswer,
  DismissAnswer,
  EndAnswer,
  FeedbackAnswer,
  HealthAnswer,
  MessagesAnswer,
  OverrideAnswer,
  PatternsClearedAnswer,
  SessionInfoAnswer,
} from './response-schemas.js';
import { sessionListRoutes } from './session-list-route.js';
import { streamComponentSchemas } from './stream-schemas.js';

const modelId = z.string().regex(/^[a-z0-9-]+:\S+$/, 'must be "provider:name", e.g. scripted:demo');

const CreateSessionBody = z.strictObject({
  workspace_path: z.string().min(1).optional(),
  model: modelId.optional(),
  budget: BudgetBody.optional(),
});
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
  readonly trace: StoreContext;
  /** Bound of that wait (default 5 s); storage that does not come back by then answers 503/507. */
  readonly commitWaitMs?: number;
  readonly tokens: AttachTokens;
  /** `metis serve --conformance --fault …`: guarantees broken on purpose (faults.ts). */
  readonly faults?: FaultSwitches;
  /** metis's version, for `GET /openapi.json`. */
  readonly version?: string;
  /** Base of the WebSocket URLs handed out by the attach handshake, e.g. `ws://127.0.0.1:8421`. */
  /** Where a client reaches the stream, as it reached this request (a load balancer's address too). */
  readonly wsBase: (request: IncomingMessage) => string;
  /** Every other route the server serves, for `GET /openapi.json`. */
  readonly otherRoutes?: () => readonly RouteDoc[];
  /** Where `GET /sessions` reads (session-list-route.ts): this server's database or the store of record. */
  readonly sessionList: SessionLister;
  /** The store's and the cluster's state, for `GET /healthz`. */
  readonly health?: () => Record<string, unknown>;
  /** In a cluster: makes this node the owner of a session it just created. */
  readonly sessionGate?: SessionGate;
}

/**
 * `ok`, or `degraded` when the store refuses writes or the broker is away: the process is alive (200
 * either way), and a load balancer that reads the body can send new turns elsewhere.
 */
function healthStatus(parts: Record<string, unknown>): 'ok' | 'degraded' {
  const store = parts.store as { state?: string } | undefined;
  const broker = parts.broker as { state?: string } | undefined;
  if (store !== undefined && store.state !== 'ok') return 'degraded';
  if (broker !== undefined && broker.state !== 'connected') return 'degraded';
  return 'ok';
}

/**
 * The HTTP API (docs/http-api.md): sessions, turns, cancel, history, confirmations, the sticky model
 * and health. Every body is validated; every failure is `{error: {code, message}}` with its status.
 */
export function apiRoutes(context: ApiContext): Route[] {
  const { runtime, tokens, trace, faults } = context;
  const routes: Route[] = [
    jsonRoute(
      {
        method: 'GET',
        path: '/healthz',
        summary: 'Liveness, and the state of the store and the cluster',
        open: true,
        success: {
          status: 200,
          description:
            '{status: ok | degraded}, with {store: {state}} on PostgreSQL and {broker: {state}} in a cluster',
          schema: HealthAnswer,
        },
        errors: [],
      },
      async () => {
        // What service-server.ts adds: the store's and the broker's states (HealthAnswer).
        const parts = (context.health?.() ?? {}) as Omit<z.output<typeof HealthAnswer>, 'status'>;
        return [200, { status: healthStatus(parts), ...parts }];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions',
        summary: 'Create a session',
        body: CreateSessionBody,
        success: {
          status: 201,
          description: 'the session, once session.created is stored',
          schema: CreatedSessionAnswer,
        },
        errors: ['METIS_ERR_INVALID_MODEL', ...STORAGE_ERRORS],
      },
      async ({ body }) => {
        assertStorageWritable(trace);
        // Owned before its first event is written: a cluster node's writes are fenced by its leases.
        const sessionId = newId('sess');
        await context.sessionGate?.(sessionId, true);
        const { result: session, event } = emittedDuring(
          trace,
          (e) => e.type === 'session.created',
          () =>
            runtime.createSession({
              workspacePath: body.workspace_path,
              model: body.model ?? null,
              sessionId,
            }),
        );
        if (body.budget !== undefined) withBudget(runtime, session.id, body.budget);
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
    // GET /sessions (search, filters, pages) and PATCH /sessions/{session_id} (the title).
    ...sessionListRoutes({
      runtime,
      list: context.sessionList,
      store: trace,
      commitWaitMs: context.commitWaitMs,
    }),
    jsonRoute(
      {
        method: 'GET',
        path: '/openapi.json',
        summary: 'This description, generated from the route declarations',
        // It holds no data, and a client generator fetches it without credentials (auth-gate.ts).
        open: true,
        success: { status: 200, description: 'OpenAPI 3.1', schema: OpenApiDocumentSchema },
        errors: [],
      },
      async () => [
        200,
        openApiDocument(
          [...routes, ...(context.otherRoutes?.() ?? [])],
          context.version ?? '0.0.0',
          streamComponentSchemas(),
        ),
      ],
    ),
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}',
        summary: 'Attach handshake: the session and a single-use WebSocket URL',
        success: { status: 200, description: 'session, attach_token, ws_url', schema: AttachAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id], request }) => {
        const session = await runtime.describe(id!);
        const token = tokens.issue(session.id);
        return [
          200,
          {
            session_id: session.id,
            active_model: session.active_model,
            attach_token: token,
            ws_url: `${context.wsBase(request)}/sessions/${encodeURIComponent(session.id)}/stream?attach=${token}`,
            session,
          },
        ];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/turns',
        summary: 'Submit a user message: starts a turn, or queues or steers it while one runs (multitask)',
        body: SubmitTurnBody,
        success: {
          status: 202,
          description:
            'started {turn_id} once turn.started is stored; queued {queued_id, position}; steered {queued_id, turn_id}',
          schema: SubmittedAnswer,
        },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_SESSION_ENDED',
          'METIS_ERR_SERVER_DRAINING',
          'METIS_ERR_TURN_IN_FLIGHT',
          'METIS_ERR_INVALID_MODEL',
          ...STORAGE_ERRORS,
        ],
      },
      // multitask (issue 31): queue-routes.ts.
      async ({ params: [id], body }) => submitTurn(runtime, trace, id!, body, context.commitWaitMs),
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/turns/{turn_id}/cancel',
        summary: 'Cancel a turn (idempotent)',
        body: CancelBody,
        success: {
          status: 202,
          description: 'turn_id and status: cancelling, already_cancelling or already_ended',
          schema: CancelAnswer,
        },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_TURN_NOT_FOUND'],
      },
      async ({ params: [id, turnId], body }) => {
        const status = runtime.cancelTurn(id!, turnId!, body.reason ?? 'user_cancel');
        // The old behaviour, for the conformance suite to catch: an ended turn as not found.
        if (status === 'already_ended' && faults?.cancelEndedNotFound)
          throw new MetisError(
            'METIS_ERR_TURN_NOT_FOUND',
            `turn ${turnId} is not in flight in session ${id}`,
          );
        return [202, { turn_id: turnId!, status }];
      },
    ),
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/messages',
        summary: 'A page of the conversation, newest last',
        query: MessagesQuery,
        success: { status: 200, description: 'messages and has_more', schema: MessagesAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id], query }) => {
        await runtime.describe(id!);
        // A cursor that names no message of this session would page from the newest, silently.
        const { conversations } = trace.port;
        if (query.before !== undefined && !(await conversations.hasMessage(id!, query.before))) {
          throw new MetisError(
            'METIS_ERR_INVALID_ARGUMENT',
            `before: ${query.before} is not a message of session ${id}`,
          );
        }
        const messages = await conversations.messages(id!, {
          beforeId: query.before ?? null,
          limit: query.limit,
        });
        return [200, { messages, has_more: messages.length === query.limit }];
      },
    ),
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/confirmations',
        summary: 'Tool calls waiting for approval, here and in the workers below',
        // The questions a turn waits on live in the memory of the node running it: read there.
        placement: 'owner',
        success: { status: 200, description: 'confirmations', schema: ConfirmationsAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id] }) => {
        await runtime.describe(id!);
        return [200, { confirmations: runtime.pendingConfirmations(id!) }];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/confirmations/{confirmation_request_id}',
        summary: 'Allow or deny a tool call',
        body: ConfirmBody,
        success: { status: 200, description: 'the decision taken', schema: DecisionAnswer },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_CONFIRMATION_NOT_FOUND',
          'METIS_ERR_CONFIRMATION_MISMATCH',
        ],
      },
      async ({ params: [id, requestId], body }) => {
        runtime.confirm(id!, requestId!, body.decision, body.scope ?? 'once', null, body.input_hash);
        return [200, { confirmation_request_id: requestId!, decision: body.decision }];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/feedback',
        summary: 'Rate a turn or the session (feedback.explicit)',
        body: FeedbackBody,
        success: { status: 201, description: 'event_id, scope, rating', schema: FeedbackAnswer },
        errors: [
          'METIS_ERR_SESSION_NOT_FOUND',
          'METIS_ERR_TURN_NOT_FOUND',
          'METIS_ERR_TURN_IN_FLIGHT',
          ...STORAGE_ERRORS,
        ],
      },
      async ({ params: [id], body }) => {
        await runtime.describe(id!);
        assertStorageWritable(trace);
        // The rated turn's end may still wait for its commit: let it land before looking it up.
        await untilCommitted(trace, null, context.commitWaitMs);
        const event = await recordExplicitFeedback(trace.bus, trace.port.lookups, {
          sessionId: id!,
          rating: body.rating,
          turnId: body.turn_id ?? null,
          comment: body.comment ?? null,
        });
        await untilCommitted(trace, event, context.commitWaitMs);
        // The scope feedback.explicit's payload carries (events/catalog/feedback.ts).
        const scope = event.payload.scope as z.output<typeof FeedbackAnswer>['scope'];
        return [201, { event_id: event.id, scope, rating: body.rating }];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/end',
        summary: 'End the session (session.ended); it is then scored',
        body: EndBody,
        success: { status: 200, description: 'session_id, status, disposition', schema: EndAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_TURN_IN_FLIGHT', ...STORAGE_ERRORS],
      },
      async ({ params: [id], body }) => {
        assertStorageWritable(trace);
        // A turn paused at its budget ends with the session (issue 31): cancelled, then the session ends.
        await endPausedTurns(runtime, id!);
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
        const stored = (event?.payload.disposition ??
          runtime.sessions.getSession(id!)?.disposition ??
          disposition) as z.output<typeof EndAnswer>['disposition'];
        return [200, { session_id: id!, status: 'ended' as const, disposition: stored }];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/route/override',
        summary: 'Apply the deferred pattern recommendation to the running turn',
        success: {
          status: 200,
          description: 'turn_id, original_chosen_model, new_chosen_model',
          schema: OverrideAnswer,
        },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_NO_RECOMMENDATION', ...STORAGE_ERRORS],
      },
      async ({ params: [id] }) => {
        assertStorageWritable(trace);
        return [200, runtime.overrideRoute(id!)];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/route/dismiss',
        summary: 'Dismiss the pending pattern recommendation',
        success: {
          status: 200,
          description: 'turn_id, chosen_model, dismissed_pattern_model',
          schema: DismissAnswer,
        },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_NO_RECOMMENDATION', ...STORAGE_ERRORS],
      },
      async ({ params: [id] }) => {
        assertStorageWritable(trace);
        return [200, runtime.dismissRecommendation(id!)];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/patterns/clear',
        summary: 'Forget every learned pattern outcome',
        success: { status: 200, description: 'entries_evicted', schema: PatternsClearedAnswer },
        errors: ['METIS_ERR_INVALID_ARGUMENT', ...STORAGE_ERRORS],
      },
      async () => {
        assertStorageWritable(trace);
        return [200, runtime.clearPatterns()];
      },
    ),
    jsonRoute(
      {
        method: 'PUT',
        path: '/sessions/{session_id}/model',
        summary: "Set the session's model (manual_sticky)",
        body: ModelBody,
        success: { status: 200, description: 'the session', schema: SessionInfoAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_INVALID_MODEL'],
      },
      async ({ params: [id], body }) => {
        return [200, runtime.setStickyModel(id!, body.model)];
      },
    ),
  ];

  return routes;
}
