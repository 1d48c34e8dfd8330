import { z } from 'zod';
import { MetisError } from '../errors.js';
import { nowMicros } from '../events/clock.js';
import { STORAGE_ERRORS } from '../http/openapi.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import type { Runtime } from '../runtime/runtime.js';
import {
  type SessionLister,
  type SessionListRow,
  sessionListRows,
  setSessionTitle,
} from '../store/session-search.js';
import type { StoreContext } from '../store/store-context.js';
import type { TraceContext } from '../store/trace-context.js';
import { SessionItemAnswer, SessionListAnswer } from './response-schemas.js';

const isoTime = z
  .string()
  .refine((text) => /^\d{4}-\d{2}-\d{2}/.test(text) && Number.isFinite(Date.parse(text)), {
    message: 'must be an ISO 8601 date or date-time, e.g. 2026-11-28 or 2026-11-28T10:00:00Z',
  });
const usdBound = z.coerce.number().nonnegative().max(1e9);
const msBound = z.coerce.number().nonnegative().max(1e12);

export const SessionListQuery = z.strictObject({
  q: z
    .string()
    .max(500)
    .optional()
    .describe('words found (as prefixes) in user and assistant messages, or in the title'),
  status: z.enum(['open', 'ended']).optional(),
  turn_status: z
    .enum(['running', 'completed', 'failed', 'cancelled'])
    .optional()
    .describe('of the last turn'),
  model: z.string().min(1).max(200).optional().describe('the model of its last model call'),
  from: isoTime.optional().describe('created at or after (ISO 8601)'),
  to: isoTime.optional().describe('created before (ISO 8601)'),
  min_cost_usd: usdBound.optional(),
  max_cost_usd: usdBound.optional(),
  min_latency_p95_ms: msBound.optional().describe("bound on latency_ms.p95 (its model calls' p95)"),
  max_latency_p95_ms: msBound.optional(),
  include_conformance: z
    .enum(['true', 'false'])
    .default('false')
    .describe('show the sessions `metis conformance run` made (tagged conformance)'),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(200).optional().describe('next_cursor of the previous page'),
});

const TitleBody = z.strictObject({
  title: z
    .string()
    .trim()
    .min(1)
    .max(200)
    .nullable()
    .describe('the title; null clears it (the first message titles the session again)'),
});

/** Without any query parameter the list answers as before the search existed: every session, 100 of them. */
const LEGACY_LIMIT = 100;

/** The opaque cursor: where the page ended, in the list's order. */
function encodeCursor(row: SessionListRow): string {
  return Buffer.from(JSON.stringify([row.created_at_us, row.id])).toString('base64url');
}

function decodeCursor(cursor: string): { createdAtUs: number; id: string } {
  try {
    const [createdAtUs, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    if (Number.isSafeInteger(createdAtUs) && typeof id === 'string')
      return { createdAtUs: createdAtUs as number, id };
  } catch {}
  throw new MetisError(
    'METIS_ERR_INVALID_ARGUMENT',
    'cursor: not a cursor this server gave (use next_cursor)',
  );
}

const micros = (iso: string): number => Date.parse(iso) * 1000;

/**
 * `GET /sessions` (search, filters, pages) and `PATCH /sessions/{session_id}` (the title). Every filter
 * runs in SQL on the summaries the database keeps (store/session-index-schema.ts).
 */
export function sessionListRoutes(
  runtime: Runtime,
  trace: StoreContext | TraceContext,
  /** Where the list is read: this server's database, or the store of record on a cluster node. */
  list: SessionLister,
): JsonRoute[] {
  const withLiveTurn = (row: SessionListRow) => ({
    ...row,
    current_turn_id: runtime.currentTurn(row.id)?.turnId ?? null,
  });
  return [
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions',
        summary:
          'Sessions, newest first: search, filters and pages, with title, turns, cost, tokens, latency and the turn running',
        query: SessionListQuery,
        success: { status: 200, description: 'sessions and next_cursor', schema: SessionListAnswer },
        errors: [],
      },
      async ({ query, url }) => {
        // No parameter but the auth gate's `?token=`: the list as it was before the search.
        const legacy = [...url.searchParams.keys()].every((key) => key === 'token');
        if (
          query.min_cost_usd !== undefined &&
          query.max_cost_usd !== undefined &&
          query.min_cost_usd > query.max_cost_usd
        )
          throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'min_cost_usd: above max_cost_usd');
        const limit = legacy ? LEGACY_LIMIT : query.limit;
        const { rows, more } = await list({
          q: query.q,
          status: query.status === undefined ? undefined : query.status === 'open' ? 'active' : 'ended',
          turnStatus: query.turn_status,
          model: query.model,
          fromUs: query.from === undefined ? undefined : micros(query.from),
          toUs: query.to === undefined ? undefined : micros(query.to) - 1,
          minCostUsd: query.min_cost_usd,
          maxCostUsd: query.max_cost_usd,
          minLatencyP95Ms: query.min_latency_p95_ms,
          maxLatencyP95Ms: query.max_latency_p95_ms,
          includeConformance: legacy || query.include_conformance === 'true',
          limit,
          after: query.cursor === undefined ? null : decodeCursor(query.cursor),
        });
        return [
          200,
          {
            sessions: rows.map(withLiveTurn),
            next_cursor: more && rows.length > 0 ? encodeCursor(rows.at(-1)!) : null,
          },
        ];
      },
    ),
    jsonRoute(
      {
        method: 'PATCH',
        path: '/sessions/{session_id}',
        summary: "Set or clear a session's title",
        body: TitleBody,
        success: { status: 200, description: 'the session as the list shows it', schema: SessionItemAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', ...STORAGE_ERRORS],
        // Written by the session's owner, whose copy holds it, and shipped with its rows (a title is the
        // session's, not one node's).
        placement: 'owner',
      },
      async ({ params: [id], body }) => {
        // Until titles go through the store's writer, they are the SQLite file's alone.
        if (!('db' in trace))
          throw new MetisError('METIS_ERR_STORE_UNAVAILABLE', 'titles need the SQLite store');
        const [before] = sessionListRows(trace.db, [id!]);
        if (before === undefined || id === 'system')
          throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${id}`);
        setSessionTitle(trace.db, id!, body.title, nowMicros());
        return [200, withLiveTurn(sessionListRows(trace.db, [id!])[0]!)];
      },
    ),
  ];
}
