/**
 * Latency as a log histogram, `{bin: calls}` JSON kept by triggers (session summaries, usage rollup):
 * bin b holds the calls that took about 2^(b/8) ms, so a percentile read from it is within ~4.4% (half a
 * bin) of the exact value, and histograms of hours, days or a session merge by adding.
 */

/** Bins per doubling. */
export const LATENCY_BINS_PER_OCTAVE = 8;
/** The last bin kept apart: 2^(511/8) ms is beyond any call; longer ones count there. */
const MAX_BIN = 511;

/** SQL: the bin of a latency in ms (0 and below count as 1 ms). */
export const binOf = (latency: string): string =>
  `CAST(round(${LATENCY_BINS_PER_OCTAVE} * log2(max(coalesce(${latency}, 0), 1))) AS INTEGER)`;

/** SQL: the JSON path of a latency's bin in a histogram: `$."42"`. */
export const binPath = (latency: string): string => `'$."' || ${binOf(latency)} || '"'`;

/** SQL: `histogram` (a column) with one more call of `latency`. */
export const addToHistogram = (histogram: string, latency: string): string =>
  `json_set(coalesce(${histogram}, '{}'), ${binPath(latency)}, coalesce(json_extract(${histogram}, ${binPath(latency)}), 0) + 1)`;

export function emptyHistogram(): Float64Array {
  return new Float64Array(MAX_BIN + 1);
}

/** Adds a stored histogram (its JSON) into `into`. */
export function addHistogram(into: Float64Array, json: string): void {
  const counts = JSON.parse(json) as Record<string, number>;
  for (const bin in counts) into[Math.min(MAX_BIN, Number(bin))]! += counts[bin]!;
}

/** The nearest-rank quantile of a histogram, as its bin's centre in ms (0.1 ms); null when empty. */
export function binQuantile(histogram: Float64Array, q: number): number | null {
  let total = 0;
  for (const calls of histogram) total += calls;
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let bin = 0; bin < histogram.length; bin += 1) {
    seen += histogram[bin]!;
    if (seen >= rank) return Math.round(2 ** (bin / LATENCY_BINS_PER_OCTAVE) * 10) / 10;
  }
  return null;
}

/**
 * The quantile of one stored histogram (its JSON), or null: what the list shows and its latency bounds
 * compare, computed per session in SQL (`latency_quantile`), so it walks the few bins a session has.
 */
export function storedQuantile(json: string | null, q: number): number | null {
  if (json === null) return null;
  const counts = JSON.parse(json) as Record<string, number>;
  const bins: number[] = [];
  let total = 0;
  for (const bin in counts) {
    bins.push(Number(bin));
    total += counts[bin]!;
  }
  if (total === 0) return null;
  bins.sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (const bin of bins) {
    seen += counts[String(bin)]!;
    if (seen >= rank) return Math.round(2 ** (Math.min(MAX_BIN, bin) / LATENCY_BINS_PER_OCTAVE) * 10) / 10;
  }
  return null;
}
