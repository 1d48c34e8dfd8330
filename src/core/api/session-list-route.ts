import { z } from 'zod';
import { MetisError } from '../errors.js';
import { nowMicros } from '../events/clock.js';
import { STORAGE_ERRORS } from '../http/openapi.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import type { Runtime } from '../runtime/runtime.js';
import type { SessionLister, SessionListRow } from '../store/session-search.js';
import { assertStorageWritable, type CommitTarget, untilRowCommitted } from '../stream/commit-ack.js';
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

/** What the session list's routes need of the server. */
export interface SessionListParts {
  /** Only for the turn running here now (`current_turn_id`), from its memory. */
  readonly runtime: Pick<Runtime, 'runningTurnId'>;
  /** Where the list and a titled session are read: this server's database, or the store of record. */
  readonly list: SessionLister;
  /** Where a title is written, and acknowledged once committed. */
  readonly store: CommitTarget;
  /** Bound of the wait for a title's commit (default 5 s); storage not back by then answers 503/507. */
  readonly commitWaitMs?: number;
}

/**
 * `GET /sessions` (search, filters, pages) and `PATCH /sessions/{session_id}` (the title). Every filter
 * runs in SQL: on the summaries a SQLite database keeps (store/session-index-schema.ts), on the events
 * in PostgreSQL (store/postgres/pg-session-search.ts).
 */
export function sessionListRoutes(parts: SessionListParts): JsonRoute[] {
  const { runtime, list, store } = parts;
  const withLiveTurn = (row: SessionListRow) => ({
    ...row,
    current_turn_id: runtime.runningTurnId(row.id),
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
        const { rows, more } = await list.search({
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
        // Written by the session's owner through its store writer, with its other rows (a title is the
        // session's, not one node's); behind a working copy, answered once shipped.
        placement: 'owner',
      },
      async ({ params: [id], body }) => {
        const sessionId = id!;
        if (sessionId === 'system' || (await list.row(sessionId)) === undefined)
          throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
        assertStorageWritable(store);
        await untilRowCommitted(
          store,
          `the title of ${sessionId}`,
          { kind: 'title.set', sessionId, title: body.title, atUs: nowMicros() },
          parts.commitWaitMs,
        );
        // Read again: the row as stored, with what else changed meanwhile (a turn's figures).
        const after = await list.row(sessionId);
        if (after === undefined)
          throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${sessionId}`);
        return [200, withLiveTurn(after)];
      },
    ),
  ];
}
