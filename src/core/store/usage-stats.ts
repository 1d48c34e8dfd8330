import type { Db } from './database.js';
import { addHistogram, binQuantile, emptyHistogram } from './latency-bins.js';
import { USAGE_HOUR_US } from './usage-rollup-schema.js';

export { NO_MODEL } from './usage-rollup-schema.js';

/** One row of `GET /stats/usage`: a bucket of time and a model. */
export interface UsageRow {
  readonly bucket: string;
  readonly model: string;
  readonly calls: number;
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly cost_usd: number;
  readonly latency_p50_ms: number | null;
  readonly latency_p95_ms: number | null;
  readonly failures: number;
  readonly failed_calls: number;
  readonly failed_turns: number;
  readonly feedback_up: number;
  readonly feedback_down: number;
  readonly eval_count: number;
  readonly eval_mean: number | null;
}

export interface UsageQuery {
  /** Rounded down to its hour: the rollup is hourly. */
  readonly fromUs: number;
  /** Exclusive. */
  readonly toUs: number;
  readonly bucket: 'hour' | 'day';
  readonly model?: string;
}

const BUCKET_US = { hour: USAGE_HOUR_US, day: 24 * USAGE_HOUR_US } as const;

type Totals = Omit<UsageRow, 'bucket' | 'latency_p50_ms' | 'latency_p95_ms' | 'eval_mean' | 'failures'> & {
  bucket_us: number;
  eval_sum: number;
};

/**
 * Calls, tokens, cost, latency percentiles, failures and scores per bucket and model, from the hourly
 * rollup the database keeps (usage-rollup-schema.ts): a 90-day chart reads a few thousand rows whatever
 * the number of events. Percentiles come from the latency histogram (within ~4.4%).
 */
export function usageByBucket(db: Db, query: UsageQuery): UsageRow[] {
  const width = BUCKET_US[query.bucket];
  const params = {
    from: Math.floor(query.fromUs / USAGE_HOUR_US) * USAGE_HOUR_US,
    to: query.toUs,
    width,
    model: query.model ?? null,
  };
  const where = 'hour_us >= @from AND hour_us < @to AND (@model IS NULL OR model = @model)';
  const totals = db
    .prepare(
      `SELECT CAST(hour_us / @width AS INTEGER) * @width AS bucket_us, model, sum(calls) AS calls,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd,
              sum(failed_calls) AS failed_calls, sum(failed_turns) AS failed_turns,
              sum(feedback_up) AS feedback_up, sum(feedback_down) AS feedback_down,
              sum(eval_count) AS eval_count, sum(eval_sum) AS eval_sum
         FROM usage_hourly WHERE ${where}
        GROUP BY 1, 2 ORDER BY 1, 2`,
    )
    .all(params) as Totals[];
  // Per hour, then merged per bucket: the histograms are small objects, one per hour and model.
  const hours = db
    .prepare(
      `SELECT CAST(hour_us / @width AS INTEGER) * @width, model, latency_bins FROM usage_hourly
        WHERE ${where} AND latency_bins IS NOT NULL`,
    )
    .raw()
    .all(params) as [number, string, string][];
  const histograms = new Map<string, Float64Array>();
  for (const [bucketUs, model, bins] of hours) {
    const key = `${bucketUs}\u0000${model}`;
    let merged = histograms.get(key);
    if (merged === undefined) {
      merged = emptyHistogram();
      histograms.set(key, merged);
    }
    addHistogram(merged, bins);
  }
  return totals.map(({ bucket_us, eval_sum, ...row }) => {
    const histogram = histograms.get(`${bucket_us}\u0000${row.model}`) ?? new Float64Array(0);
    return {
      bucket: new Date(bucket_us / 1000).toISOString(),
      ...row,
      latency_p50_ms: binQuantile(histogram, 0.5),
      latency_p95_ms: binQuantile(histogram, 0.95),
      failures: row.failed_calls + row.failed_turns,
      eval_mean: row.eval_count === 0 ? null : eval_sum / row.eval_count,
    };
  });
}
