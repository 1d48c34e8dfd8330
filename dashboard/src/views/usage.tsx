import { useMemo, useRef, useState } from 'preact/hooks';
import type { UsageAnswer, UsageRow } from '../api.js';
import { duration, usd } from '../format.js';
import { usePolled } from '../hooks.js';
import type { Report } from '../report.js';
import { LineChart, type Series } from './chart.js';

const RANGES = {
  '24h': { label: 'last 24 hours', ms: 86_400_000, bucket: 'hour' },
  '7d': { label: 'last 7 days', ms: 7 * 86_400_000, bucket: 'day' },
  '30d': { label: 'last 30 days', ms: 30 * 86_400_000, bucket: 'day' },
} as const;
type Range = keyof typeof RANGES;
const HOUR_MS = 3_600_000;

/** What the models cost and how they did over time, per model: GET /stats/usage drawn. */
export function UsagePanel({ report }: { report: Report }) {
  const [range, setRange] = useState<Range>('24h');
  const [model, setModel] = useState('');
  // From the start of the hour: the path stays the same between polls, the answer follows the hour.
  const path = useMemo(() => {
    const { ms, bucket } = RANGES[range];
    const from = new Date(Math.floor((Date.now() - ms) / HOUR_MS) * HOUR_MS).toISOString();
    const query = new URLSearchParams({ from, bucket });
    if (model !== '') query.set('model', model);
    return `/stats/usage?${query}`;
  }, [range, model]);
  const { data, error } = usePolled<UsageAnswer>(path, 30_000, report);
  // The models of the unfiltered answer: the choice (and each model's colour) stays while one is picked.
  const known = useRef<string[]>([]);
  if (model === '' && data !== null) known.current = [...new Set(data.rows.map((row) => row.model))].sort();
  const models = known.current;
  return (
    <section aria-labelledby="usage-title" class="usage">
      <div class="toolbar">
        <h2 id="usage-title">Usage</h2>
        <label>
          Range{' '}
          <select value={range} onChange={(event) => setRange(event.currentTarget.value as Range)}>
            {Object.entries(RANGES).map(([key, { label }]) => (
              <option key={key} value={key}>
                {label}
              </option>
            ))}
          </select>
        </label>
        <label>
          Model{' '}
          <select value={model} onChange={(event) => setModel(event.currentTarget.value)}>
            <option value="">all</option>
            {models.map((name) => (
              <option key={name} value={name}>
                {name}
              </option>
            ))}
          </select>
        </label>
      </div>
      {error !== null && error.status !== 0 && (
        <p class="banner error" role="alert">
          usage: {error.message}
        </p>
      )}
      {data === null ? (
        error === null && <p>Loading…</p>
      ) : data.rows.length === 0 ? (
        <p class="muted">No model calls in this range.</p>
      ) : (
        <UsageCharts answer={data} models={models} />
      )}
    </section>
  );
}

function UsageCharts({ answer, models }: { answer: UsageAnswer; models: readonly string[] }) {
  const buckets = bucketsOf(answer);
  const label = (iso: string) =>
    answer.bucket === 'hour' ? `${iso.slice(5, 10)} ${iso.slice(11, 13)}h` : iso.slice(5, 10);
  const colourOf = (name: string) => Math.max(0, models.indexOf(name));
  const shown = [...new Set(answer.rows.map((row) => row.model))].sort();
  const byKey = new Map(answer.rows.map((row) => [`${Date.parse(row.bucket)}|${row.model}`, row]));
  const line = (
    model: string,
    pick: (row: UsageRow) => number | null,
    empty: number | null,
    suffix = '',
  ): Series => ({
    name: `${model}${suffix}`,
    colour: colourOf(model),
    dashed: suffix === ' p95',
    values: buckets.map((ms) => {
      const row = byKey.get(`${ms}|${model}`);
      return row === undefined ? empty : pick(row);
    }),
  });
  const perModel = (pick: (row: UsageRow) => number | null, empty: number | null): Series[] =>
    shown.map((name) => line(name, pick, empty));
  const labels = buckets.map((ms) => label(new Date(ms).toISOString()));
  const totals = shown.map((name) => {
    const rows = answer.rows.filter((row) => row.model === name);
    const sum = (pick: (row: UsageRow) => number) => rows.reduce((total, row) => total + pick(row), 0);
    const evals = sum((row) => row.eval_count);
    return {
      name,
      calls: sum((row) => row.calls),
      input: sum((row) => row.input_tokens),
      output: sum((row) => row.output_tokens),
      cost: sum((row) => row.cost_usd),
      failures: sum((row) => row.failures),
      up: sum((row) => row.feedback_up),
      down: sum((row) => row.feedback_down),
      evalMean: evals === 0 ? null : sum((row) => (row.eval_mean ?? 0) * row.eval_count) / evals,
    };
  });
  return (
    <>
      <div class="charts">
        <LineChart
          title="Cost"
          testId="chart-cost"
          buckets={labels}
          series={perModel((r) => r.cost_usd, 0)}
          format={usd}
        />
        <LineChart
          title="Tokens (input + output)"
          testId="chart-tokens"
          buckets={labels}
          series={perModel((r) => r.input_tokens + r.output_tokens, 0)}
          format={compact}
        />
        <LineChart
          title="Latency p50 (solid) and p95 (dashed)"
          testId="chart-latency"
          buckets={labels}
          series={shown.flatMap((name) => [
            line(name, (r) => r.latency_p50_ms, null, ' p50'),
            line(name, (r) => r.latency_p95_ms, null, ' p95'),
          ])}
          format={(ms) => duration(ms)}
        />
        <LineChart
          title="Failures (failed model calls and turns)"
          testId="chart-failures"
          buckets={labels}
          series={perModel((r) => r.failures, 0)}
          format={compact}
        />
      </div>
      <table class="usage-totals">
        <thead>
          <tr>
            <th scope="col">Model</th>
            <th scope="col" class="num">
              Calls
            </th>
            <th scope="col" class="num">
              Tokens in / out
            </th>
            <th scope="col" class="num">
              Cost
            </th>
            <th scope="col" class="num">
              Failures
            </th>
            <th scope="col" class="num">
              Feedback
            </th>
            <th scope="col" class="num">
              Eval mean
            </th>
          </tr>
        </thead>
        <tbody>
          {totals.map((row) => (
            <tr key={row.name} data-model={row.name}>
              <td>
                <span class={`swatch series-${colourOf(row.name) % 6}`} /> {row.name}
              </td>
              <td class="num">{row.calls.toLocaleString()}</td>
              <td class="num">
                {row.input.toLocaleString()} / {row.output.toLocaleString()}
              </td>
              <td class="num">{usd(row.cost)}</td>
              <td class={`num${row.failures > 0 ? ' error' : ''}`}>{row.failures}</td>
              <td class="num">
                +{row.up} / −{row.down}
              </td>
              <td class="num">{row.evalMean === null ? '–' : row.evalMean.toFixed(2)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/** Every bucket start from the answer's `from` to its `to`, so that an empty hour reads as zero. */
function bucketsOf(answer: UsageAnswer): number[] {
  const step = answer.bucket === 'hour' ? HOUR_MS : 24 * HOUR_MS;
  const present = answer.rows.map((row) => Date.parse(row.bucket));
  const first = Math.min(Math.floor(Date.parse(answer.from) / step) * step, ...present);
  const last = Math.max(Date.parse(answer.to) - 1, ...present);
  const starts: number[] = [];
  for (let ms = first; ms <= last && starts.length < 800; ms += step) starts.push(ms);
  return starts;
}

function compact(value: number): string {
  if (value >= 1_000_000) return `${(value / 1_000_000).toFixed(1)}M`;
  if (value >= 1_000) return `${(value / 1_000).toFixed(1)}k`;
  return String(Math.round(value * 10) / 10);
}
