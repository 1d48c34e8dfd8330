/**
 * Small measurement helpers shared by the bench suites. Timing lives here and in bench/, never in
 * tests: tests only check that a suite runs and returns well-formed figures.
 */

/** What every suite receives from bench/run.ts. */
export interface SuiteOptions {
  /** Fewer iterations: a smoke run for CI, not a measurement to quote. */
  readonly quick: boolean;
}

/** A suite: runs its measurements and returns the figures to report. */
export type Suite = (opts: SuiteOptions) => Promise<Figure[]>;

export interface Target {
  readonly op: '<=' | '>=';
  readonly value: number;
}

/** One reported number, optionally compared with a baseline measured in the same run. */
export interface Figure {
  readonly name: string;
  readonly value: number;
  readonly unit: string;
  readonly baseline?: { readonly name: string; readonly value: number };
  /** value / baseline.value */
  readonly ratio?: number;
  readonly target?: Target;
  readonly pass?: boolean;
}

/** Builds a figure, filling in ratio (value / baseline) and pass (against the target). */
export function figure(input: Omit<Figure, 'ratio' | 'pass'>): Figure {
  const ratio =
    input.baseline !== undefined && input.baseline.value !== 0
      ? input.value / input.baseline.value
      : undefined;
  const pass = input.target === undefined ? undefined : meetsTarget(input.value, input.target);
  return {
    ...input,
    ...(ratio === undefined ? {} : { ratio }),
    ...(pass === undefined ? {} : { pass }),
  };
}

export function meetsTarget(value: number, target: Target): boolean {
  return target.op === '<=' ? value <= target.value : value >= target.value;
}

/**
 * The p-th percentile (0–100) of an ascending array, interpolating linearly between closest ranks.
 * Returns NaN for an empty array.
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  if (p <= 0) return sorted[0]!;
  if (p >= 100) return sorted[n - 1]!;
  const rank = (p / 100) * (n - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (rank - lo);
}

export interface MeasureOptions {
  /**
   * Runs `between` after every `every` calls (warmup and measured alike), outside the timed region:
   * for draining a queue that would otherwise hit its bound.
   */
  readonly every?: number;
  readonly between?: () => void | Promise<void>;
}

/**
 * Times each call of `fn` on its own with process.hrtime.bigint() and returns the latencies in µs,
 * ascending. The timer itself costs ~50–100 ns per call and is included, so compare figures only with
 * a baseline measured the same way. `warmup` untimed calls come first.
 */
export async function measureLatencies(
  fn: (i: number) => unknown,
  iterations: number,
  warmup: number,
  options: MeasureOptions = {},
): Promise<Float64Array> {
  const every = options.every ?? 0;
  const between = options.between;
  for (let i = 0; i < warmup; i += 1) {
    fn(i);
    if (between !== undefined && every > 0 && (i + 1) % every === 0) await between();
  }
  if (between !== undefined) await between();
  const out = new Float64Array(iterations);
  for (let i = 0; i < iterations; i += 1) {
    const t0 = process.hrtime.bigint();
    fn(i);
    const t1 = process.hrtime.bigint();
    out[i] = Number(t1 - t0) / 1000;
    if (between !== undefined && every > 0 && (i + 1) % every === 0) await between();
  }
  if (between !== undefined) await between();
  return out.sort();
}

/** Runs a full GC when node was started with --expose-gc (npm run bench does); a no-op otherwise. */
export function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === 'function') gc();
}

/** Lets pending immediates and I/O callbacks run. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

// ---------------------------------------------------------------------------------------------------
// Formatting

/** A number with a sensible number of digits for its size, thousands separated. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  const digits = abs >= 1000 ? 0 : abs >= 100 ? 1 : abs >= 10 ? 2 : 3;
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function formatRatio(ratio: number | undefined): string {
  if (ratio === undefined) return '';
  return `${ratio >= 1000 ? ratio.toFixed(0) : ratio.toPrecision(3)}×`;
}

export function formatTarget(target: Target | undefined, unit: string): string {
  if (target === undefined) return '';
  return `${target.op === '<=' ? '≤' : '≥'} ${target.value.toLocaleString('en-US', { maximumFractionDigits: 3 })} ${unit}`;
}

export function formatStatus(pass: boolean | undefined): string {
  return pass === undefined ? '' : pass ? 'PASS' : 'MISS';
}

/** One line per figure, for a suite's own section of the report. */
export function formatFigure(f: Figure): string {
  let line = `${f.name}: ${formatNumber(f.value)} ${f.unit}`;
  if (f.baseline !== undefined) {
    line += `  (baseline ${f.baseline.name}: ${formatNumber(f.baseline.value)} ${f.unit}, ratio ${formatRatio(f.ratio)})`;
  }
  if (f.target !== undefined) line += `  target ${formatTarget(f.target, f.unit)} → ${formatStatus(f.pass)}`;
  return line;
}

/** A plain-text table; columns whose header starts with '>' are right-aligned. */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, c) => Math.max(label(h).length, ...rows.map((r) => (r[c] ?? '').length)));
  const cell = (text: string, c: number) => {
    const width = widths[c] ?? 0;
    return headers[c]?.startsWith('>') ? text.padStart(width) : text.padEnd(width);
  };
  const lines = [
    headers.map((h, c) => cell(label(h), c)).join('  '),
    widths.map((w) => '-'.repeat(w)).join('  '),
    ...rows.map((r) => headers.map((_, c) => cell(r[c] ?? '', c)).join('  ')),
  ];
  return lines.map((l) => l.trimEnd()).join('\n');
}

function label(header: string): string {
  return header.startsWith('>') ? header.slice(1) : header;
}

/** The summary table: name, value, unit, baseline, baseline value, ratio, target, status. */
export function formatSummary(figures: readonly Figure[]): string {
  return formatTable(
    ['name', '>value', 'unit', 'baseline', '>baseline value', '>ratio', 'target', 'status'],
    figures.map((f) => [
      f.name,
      formatNumber(f.value),
      f.unit,
      f.baseline?.name ?? '',
      f.baseline === undefined ? '' : formatNumber(f.baseline.value),
      formatRatio(f.ratio),
      formatTarget(f.target, f.unit),
      formatStatus(f.pass),
    ]),
  );
}
