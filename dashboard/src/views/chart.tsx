/**
 * A line chart in plain SVG: a few series over the same buckets, a y axis from zero, a legend. Hand
 * drawn rather than a chart library: this is all the dashboard draws, in ~2 KB (decisions: "Charts").
 */

export interface Series {
  readonly name: string;
  /** One value per bucket; null where the series has nothing (a gap in the line). */
  readonly values: readonly (number | null)[];
  /** Drawn dashed (a p95 beside its p50, say). */
  readonly dashed?: boolean;
  /** The palette slot: series of the same model share a colour across charts. */
  readonly colour: number;
}

const WIDTH = 520;
const HEIGHT = 180;
const LEFT = 64;
const BOTTOM = 22;
const TOP = 8;

export function LineChart({
  title,
  buckets,
  series,
  format,
  testId,
}: {
  title: string;
  /** The buckets' labels, in order ("11-27 14:00", "11-27"). */
  buckets: readonly string[];
  series: readonly Series[];
  format: (value: number) => string;
  testId: string;
}) {
  const values = series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  const peak = Math.max(0, ...values);
  const top = peak === 0 ? 1 : niceCeiling(peak);
  const plotWidth = WIDTH - LEFT - 8;
  const plotHeight = HEIGHT - BOTTOM - TOP;
  const x = (index: number) =>
    LEFT + (buckets.length <= 1 ? plotWidth / 2 : (index / (buckets.length - 1)) * plotWidth);
  const y = (value: number) => TOP + plotHeight - (value / top) * plotHeight;
  const labelEvery = Math.max(1, Math.ceil(buckets.length / 6));
  return (
    <figure class="chart-figure" data-testid={testId}>
      <figcaption>{title}</figcaption>
      <svg class="chart line-chart" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={title}>
        {[0, 0.5, 1].map((share) => (
          <g key={share} class="grid">
            <line x1={LEFT} x2={WIDTH - 8} y1={y(top * share)} y2={y(top * share)} />
            <text x={LEFT - 6} y={y(top * share) + 4} text-anchor="end">
              {format(top * share)}
            </text>
          </g>
        ))}
        {buckets.map((label, index) =>
          index % labelEvery === 0 ||
          (index === buckets.length - 1 && index % labelEvery >= labelEvery / 2) ? (
            <text key={label} x={x(index)} y={HEIGHT - 6} text-anchor="middle">
              {label}
            </text>
          ) : null,
        )}
        {series.map((s) => (
          <g
            key={s.name}
            class={`series series-${s.colour % 6}${s.dashed ? ' dashed' : ''}`}
            data-series={s.name}
          >
            {segments(s.values).map((run) => (
              <polyline key={run[0]} points={run.map((i) => `${x(i)},${y(s.values[i]!)}`).join(' ')} />
            ))}
            {s.values.map((value, index) =>
              value === null ? null : (
                <circle key={index} cx={x(index)} cy={y(value)} r={3}>
                  <title>
                    {s.name}, {buckets[index]}: {format(value)}
                  </title>
                </circle>
              ),
            )}
          </g>
        ))}
      </svg>
      <ul class="legend">
        {series.map((s) => (
          <li key={s.name} class={`series-${s.colour % 6}${s.dashed ? ' dashed' : ''}`}>
            {s.name}
          </li>
        ))}
      </ul>
    </figure>
  );
}

/** Runs of consecutive buckets that have a value: each is one polyline. */
function segments(values: readonly (number | null)[]): number[][] {
  const runs: number[][] = [];
  let run: number[] = [];
  values.forEach((value, index) => {
    if (value === null) {
      if (run.length > 0) runs.push(run);
      run = [];
    } else run.push(index);
  });
  if (run.length > 0) runs.push(run);
  return runs;
}

/** 1, 2 or 5 times a power of ten, at or above `value`: a y axis a person reads at a glance. */
export function niceCeiling(value: number): number {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}
