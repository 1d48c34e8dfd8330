import { expect } from 'vitest';

/** One scrape of `GET /metrics`, parsed: `value(name, labels)` reads a sample, absent ones are undefined. */
export interface Scrape {
  readonly text: string;
  readonly samples: ReadonlyMap<string, number>;
  /** The sample with exactly these labels. */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** Every sample of a metric, as [labels, value]. */
  series(name: string): [Record<string, string>, number][];
  /** The metric's `# TYPE`. */
  type(name: string): string | undefined;
}

function key(name: string, labels: Record<string, string>): string {
  const parts = Object.keys(labels)
    .sort()
    .map((label) => `${label}="${labels[label]}"`);
  return parts.length === 0 ? name : `${name}{${parts.join(',')}}`;
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const match of text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[match[1]!] = match[2]!;
  return labels;
}

/**
 * Parses the Prometheus text format (0.0.4) strictly enough for tests: every non-comment line must be
 * `name{labels} value`, or the parse fails the test.
 */
export function parsePrometheus(text: string): Scrape {
  const samples = new Map<string, number>();
  const parsed: { name: string; labels: Record<string, string>; value: number }[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    expect(match, `not a sample line: ${line}`).not.toBeNull();
    const [, name, labelText, valueText] = match!;
    const labels = parseLabels(labelText ?? '');
    const value = Number(valueText);
    expect(Number.isNaN(value), `not a number: ${line}`).toBe(false);
    samples.set(key(name!, labels), value);
    parsed.push({ name: name!, labels, value });
  }
  return {
    text,
    samples,
    value: (name, labels = {}) => samples.get(key(name, labels)),
    series: (name) => parsed.filter((s) => s.name === name).map((s) => [s.labels, s.value]),
    type: (name) => types.get(name),
  };
}

/** Scrapes a server's `/metrics` and checks the answer is the Prometheus text format. */
export async function scrape(baseUrl: string, headers: Record<string, string> = {}): Promise<Scrape> {
  const response = await fetch(`${baseUrl}/metrics`, { headers });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheus(await response.text());
}

/** The sum of a metric's samples whose labels match `where`. */
export function sum(scraped: Scrape, name: string, where: Record<string, string> = {}): number {
  return scraped
    .series(name)
    .filter(([labels]) => Object.entries(where).every(([k, v]) => labels[k] === v))
    .reduce((total, [, value]) => total + value, 0);
}
