import { z } from 'zod';
import { eventIdTime } from '../../../events/ids.js';
import { isPresetName, PRESETS } from '../../../events/presets.js';
import { isClientSession, sendError, writeEventStreamHead } from '../../../http/http-util.js';
import { type RawRoute, rawRoute } from '../../../http/routes.js';
import type { Runtime } from '../../../runtime/runtime.js';
import { ClientConnection, type ConnectionDeps } from '../../client-connection.js';
import { describeFrameIssue, type SubscribeFrame, SubscribeFrameSchema } from '../../client-frames.js';
import { resolveFilter, sessionIdsProblem } from '../../subscription-filter.js';
import { SseTransport } from './sse-transport.js';

/**
 * The query of the SSE stream, as text (each parameter is parsed below); `token` is the access token for
 * `EventSource` (auth-gate.ts). The route refuses other parameters, and its description is this.
 */
const SseQuery = z.strictObject({
  filter: z.string().optional().describe('preset:chat (default), preset:full, or a JSON filter object'),
  event_types: z.string().optional().describe('comma-separated event types (instead of filter)'),
  actors: z.string().optional().describe('comma-separated actors'),
  include_worker_sessions: z.enum(['true', 'false']).optional(),
  session_ids: z.string().optional().describe('comma-separated: the session and its workers only'),
  since: z.string().optional().describe('an event id; the Last-Event-ID header wins over it'),
  snapshot: z.enum(['true', 'false']).optional().describe('default true without a cursor, false with one'),
  token: z.string().optional().describe('the access token, for EventSource'),
});
const KNOWN_PARAMS = new Set(Object.keys(SseQuery.shape));

const SSE_ROUTE_DOC = {
  method: 'GET',
  path: '/sessions/{session_id}/events',
  summary: 'The session stream as server-sent events (the WebSocket subscription; Last-Event-ID resumes)',
  query: SseQuery,
  success: {
    status: 200,
    description: 'text/event-stream of protocol frames',
    contentType: 'text/event-stream',
    frames: 'ServerFrame',
  },
  errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_INVALID_FILTER'],
} as const;
/** How long an `EventSource` waits before it reconnects (with `Last-Event-ID`) after a dropped stream. */
const RETRY_MS = 2_000;

type Parsed =
  | { ok: true; frame: SubscribeFrame }
  | { ok: false; status: number; code: string; message: string };

/**
 * `GET /sessions/{id}/events`: the session's stream as server-sent events, with the subscription of a
 * WebSocket `subscribe` frame taken from the query (docs/http-api.md "Server-sent events"). Errors found
 * before the stream starts (a bad filter or cursor, an unknown session) are HTTP errors with a JSON
 * body, which also stops an `EventSource` from reconnecting; those found by the subscription (a cursor
 * past the window, a replay too large) are a named `subscribe_error` event and a `close` event.
 */
export function createSseRoute(runtime: Runtime, deps: () => ConnectionDeps): RawRoute {
  return rawRoute(SSE_ROUTE_DOC, async ({ params: [sessionId], request, url }, response) => {
    const parsed = subscriptionOf(url.searchParams, request.headers['last-event-id']);
    if (!parsed.ok) return sendError(response, parsed.status, parsed.code, parsed.message);
    if (!(await isClientSession(runtime, sessionId!)))
      return sendError(response, 404, 'METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
    const scope = await filterProblem(parsed.frame, sessionId!, deps());
    if (scope !== null) return sendError(response, 400, 'METIS_ERR_INVALID_FILTER', scope);
    writeEventStreamHead(response);
    request.socket.setNoDelay(true);
    response.write(`retry: ${RETRY_MS}\n\n`);
    const connection = new ClientConnection(new SseTransport(response), sessionId!, deps());
    connection.subscribeWith(parsed.frame);
  });
}

/** The subscription the query asks for, as the WebSocket `subscribe` frame it stands for. */
function subscriptionOf(params: URLSearchParams, lastEventId: string | string[] | undefined): Parsed {
  const invalid = (message: string): Parsed => ({
    ok: false,
    status: 400,
    code: 'METIS_ERR_INVALID_ARGUMENT',
    message,
  });
  const unknown = [...params.keys()].filter((key) => !KNOWN_PARAMS.has(key));
  if (unknown.length > 0)
    return invalid(
      `unknown query parameters: ${unknown.join(', ')} (known: ${[...KNOWN_PARAMS].join(', ')})`,
    );
  const resumeFrom = Array.isArray(lastEventId) ? lastEventId[0] : lastEventId;
  const since = resumeFrom?.trim() || params.get('since') || null;
  if (since !== null) {
    try {
      eventIdTime(since);
    } catch {
      const source = resumeFrom ? 'Last-Event-ID' : 'since';
      return invalid(`${source}: ${JSON.stringify(since)} is not an event id (evt_<ULID>)`);
    }
  }
  const snapshotParam = params.get('snapshot');
  if (snapshotParam !== null && snapshotParam !== 'true' && snapshotParam !== 'false')
    return invalid(`snapshot: must be true or false, not ${JSON.stringify(snapshotParam)}`);
  // A first connection gets the state; a resume (a cursor) gets what it missed.
  const snapshot = snapshotParam === null ? since === null : snapshotParam === 'true';
  const filter = filterOf(params);
  if (typeof filter === 'string' && filter.startsWith('!')) return invalid(filter.slice(1));
  const checked = SubscribeFrameSchema.safeParse({ type: 'subscribe', filter, since, snapshot });
  if (!checked.success) return invalid(describeFrameIssue(checked.error.issues));
  return { ok: true, frame: checked.data };
}

/**
 * The filter: `filter` (a preset name or a JSON filter object), or the object's fields one by one
 * (comma-separated lists), or `preset:chat`. A string starting with "!" is the problem.
 */
function filterOf(params: URLSearchParams): unknown {
  const list = (key: string) =>
    params
      .get(key)
      ?.split(',')
      .map((item) => item.trim())
      .filter(Boolean) ?? null;
  const workers = params.get('include_worker_sessions');
  if (workers !== null && workers !== 'true' && workers !== 'false')
    return `!include_worker_sessions: must be true or false, not ${JSON.stringify(workers)}`;
  const raw = params.get('filter');
  if (raw?.trimStart().startsWith('{')) {
    try {
      return JSON.parse(raw);
    } catch {
      return '!filter: not a preset name nor valid JSON';
    }
  }
  const preset = raw ?? (list('event_types') === null ? 'preset:chat' : null);
  if (preset !== null && !isPresetName(preset))
    return `!filter: must be "preset:chat", "preset:full" or a JSON filter object, not ${JSON.stringify(preset)}`;
  const fields = ['actors', 'session_ids', 'include_worker_sessions'].some((key) => params.has(key));
  if (preset !== null && !fields) return preset;
  // A preset with other fields is its list of types with them.
  return {
    event_types: preset !== null ? [...PRESETS[preset]] : list('event_types'),
    actors: list('actors'),
    include_worker_sessions: workers === 'true',
    session_ids: list('session_ids'),
  };
}

async function filterProblem(
  frame: SubscribeFrame,
  sessionId: string,
  deps: ConnectionDeps,
): Promise<string | null> {
  const resolution = resolveFilter(frame.filter);
  if (!resolution.ok) return `unknown event types in filter: ${resolution.unknown.join(', ')}`;
  const workers = (await deps.reads.lineage(sessionId)).filter((row) => row.parent_session_id === sessionId);
  return sessionIdsProblem(
    resolution.filter,
    sessionId,
    workers.map((row) => row.id),
  );
}
