import { z } from 'zod';
import { MetisError } from '../errors.js';
import { nowMicros } from '../events/clock.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import type { WholeStoreReads } from '../store/whole-store-reads.js';
import { UsageAnswer } from './response-schemas.js';

const isoTime = z
  .string()
  .refine((text) => /^\d{4}-\d{2}-\d{2}/.test(text) && Number.isFinite(Date.parse(text)), {
    message: 'must be an ISO 8601 date or date-time, e.g. 2026-11-28 or 2026-11-28T10:00:00Z',
  });

const UsageQuery = z.strictObject({
  from: isoTime
    .optional()
    .describe('start (ISO 8601); default: 48 hours (bucket hour) or 30 days (bucket day) before to'),
  to: isoTime.optional().describe('end, exclusive (ISO 8601); default: now'),
  bucket: z.enum(['hour', 'day']).default('hour'),
  model: z.string().min(1).max(200).optional().describe('one model only, e.g. anthropic:claude-sonnet-4-5'),
});

const HOUR_US = 3_600_000_000;
const DEFAULT_SPAN_US = { hour: 48 * HOUR_US, day: 30 * 24 * HOUR_US } as const;
/** A chart has no use for more points; it also bounds the work of one request. */
const MAX_BUCKETS = 2_000;

/** `GET /stats/usage`: model calls, tokens, cost, latency, failures and scores over time, per model. */
export function usageRoute(
  /** Where the rows are read: the server's hourly rollup, or the store of record on a cluster node. */
  usage: WholeStoreReads['usage'],
): JsonRoute {
  return jsonRoute(
    {
      method: 'GET',
      path: '/stats/usage',
      summary: 'Calls, tokens, cost, latency p50/p95, failures and scores per hour or day and per model',
      query: UsageQuery,
      success: {
        status: 200,
        description: 'one row per bucket and model with activity',
        schema: UsageAnswer,
      },
      errors: [],
    },
    async ({ query }) => {
      const toUs = query.to === undefined ? nowMicros() : Date.parse(query.to) * 1000;
      const fromUs =
        query.from === undefined ? toUs - DEFAULT_SPAN_US[query.bucket] : Date.parse(query.from) * 1000;
      if (fromUs >= toUs) throw new MetisError('METIS_ERR_INVALID_ARGUMENT', 'from: must be before to');
      const width = query.bucket === 'hour' ? HOUR_US : 24 * HOUR_US;
      if ((toUs - fromUs) / width > MAX_BUCKETS)
        throw new MetisError(
          'METIS_ERR_INVALID_ARGUMENT',
          `from: more than ${MAX_BUCKETS} ${query.bucket}s before to; narrow the range or use bucket=day`,
        );
      const rows = await usage({ fromUs, toUs, bucket: query.bucket, model: query.model });
      return [
        200,
        {
          from: new Date(fromUs / 1000).toISOString(),
          to: new Date(toUs / 1000).toISOString(),
          bucket: query.bucket,
          rows,
        },
      ];
    },
  );
}
