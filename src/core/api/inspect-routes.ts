import { z } from 'zod';
import { MetisError } from '../errors.js';
import { EnvelopeSchema } from '../events/envelope.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import type { Runtime } from '../runtime/runtime.js';
import type { StreamReads } from '../store/stream-reads.js';
import type { TraceContentReads } from '../store/trace-content-rows.js';
import type { WholeStoreReads } from '../store/whole-store-reads.js';
import { ScoreEntry, ScoresAnswer, TraceContentEntry } from './response-schemas.js';
import {
  type ContentMode,
  ContentRedactor,
  scoreSummary,
  sessionScores,
  traceContent,
} from './session-trace-content.js';
import { usageRoute } from './usage-route.js';

const TraceQuery = z.strictObject({
  after: z
    .string()
    .regex(/^evt_[0-9A-HJKMNP-TV-Z]{26}$/, 'must be an event id (evt_<ULID>)')
    .optional()
    .describe('only events after this id (the last one of the previous page)'),
  limit: z.coerce.number().int().min(1).max(5_000).default(2_000),
  include_worker_sessions: z.enum(['true', 'false']).default('false'),
});

const count = z.int().nonnegative();

const TraceAnswer = z.object({
  events: z.array(EnvelopeSchema),
  has_more: z.boolean().describe('more events follow: ask again with after = the last id'),
  content_mode: z.enum(['full', 'redacted']).describe('server.dashboard_content'),
  content: z
    .record(z.string(), TraceContentEntry)
    .describe(
      'what each span of this page shows (user message, model output, tool input and output, route, cost), by the id of the event that opens it: turn.started, route.decided, llm.call_started, tool.called',
    ),
  scores: z.array(ScoreEntry).describe("the session's feedback and eval verdicts; on the first page only"),
});

/** What `metis trace stats --json` prints (stats.ts TraceStats) without by_session, and the chart. */
const StoreStatsAnswer = z.object({
  db_path: z.string(),
  schema_version: z.int(),
  file_bytes: count,
  wal_bytes: count,
  event_count: count,
  session_count: count,
  oldest_event_timestamp: z.string().nullable(),
  newest_event_timestamp: z.string().nullable(),
  by_type: z.array(z.object({ type: z.string(), count })),
  retention_days: z.number(),
  by_hour: z.array(z.object({ hour: z.string().describe('UTC, e.g. 2026-11-27T14'), count })),
});

const ModelsAnswer = z.object({ default_model: z.string(), models: z.array(z.string()) });

/** Hours of history `GET /store/stats` charts. */
const CHART_HOURS = 48;

/**
 * Read-only views of what metis stores and serves, for the dashboard and for scripts: a session's stored
 * events (the trace), the store's figures (`metis trace stats`), and the models a session may pick.
 */
export function inspectRoutes(
  runtime: Runtime,
  retentionDays: number,
  options: {
    readonly dashboardContent?: ContentMode;
    /** Where `GET /stats/usage` and `GET /store/stats` read. */
    readonly wholeStore: WholeStoreReads;
    /** Where a session's trace page and scores read. */
    readonly traceReads: TraceContentReads;
    /** A session and those below it, as the store has them (StreamReads.lineage). */
    readonly lineage: StreamReads['lineage'];
  },
): JsonRoute[] {
  const redactor = new ContentRedactor(options.dashboardContent ?? 'full');
  return [
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/trace',
        summary: "A session's stored events in id order (its workers' too on request), a page at a time",
        query: TraceQuery,
        success: { status: 200, description: 'events and has_more', schema: TraceAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id], query }) => {
        await runtime.describe(id!);
        const sessionIds =
          query.include_worker_sessions === 'true'
            ? (await options.lineage(id!)).map((session) => session.id)
            : [id!];
        const reads = options.traceReads;
        const { events, tooLarge } = await reads.replay({
          sessionIds,
          afterId: query.after ?? null,
          limit: query.limit,
        });
        return [
          200,
          {
            events,
            has_more: tooLarge,
            content_mode: redactor.mode,
            content: await traceContent(reads, events, redactor),
            scores: query.after === undefined ? await sessionScores(reads, id!, redactor) : [],
          },
        ];
      },
    ),
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/scores',
        summary: "A session's feedback and eval verdicts, per turn and for the session",
        success: { status: 200, description: 'scores and their summary', schema: ScoresAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id] }) => {
        if (!(await runtime.knowsSession(id!)))
          throw new MetisError('METIS_ERR_SESSION_NOT_FOUND', `no session ${id}`);
        const scores = await sessionScores(options.traceReads, id!, redactor);
        return [200, { session_id: id!, scores, summary: scoreSummary(scores) }];
      },
    ),
    usageRoute(options.wholeStore.usage),
    jsonRoute(
      {
        method: 'GET',
        path: '/store/stats',
        summary: 'The trace store: counts by type, sizes, oldest event, retention, events per hour',
        success: {
          status: 200,
          description: 'what `metis trace stats --json` prints, and by_hour',
          schema: StoreStatsAnswer,
        },
        errors: [],
      },
      async () => {
        return [
          200,
          { ...(await options.wholeStore.storeStats(CHART_HOURS)), retention_days: retentionDays },
        ];
      },
    ),
    jsonRoute(
      {
        method: 'GET',
        path: '/models',
        summary: 'The models this server can serve now, from its configuration',
        success: { status: 200, description: 'default_model and models', schema: ModelsAnswer },
        errors: [],
      },
      async () => {
        const config = runtime.config;
        const named = [
          config.default_model,
          ...Object.values(config.workspace_models),
          ...config.routing_rules.map((rule) => rule.model),
          ...Object.values(config.worker_tiers),
          ...Object.keys(config.pricing).filter((key) => !key.endsWith(':*')),
        ];
        const models = [...new Set(named)].filter((model) => runtime.models.resolve(model).ok).sort();
        return [200, { default_model: config.default_model, models }];
      },
    ),
  ];
}
