import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { execa } from 'execa';
import { MetisError } from '../../core/errors.js';
import { type Frame, initialState, reduce } from '../reducer.js';
import { projectState } from '../state-projection.js';

/** A recorded server trace (streaming spec §11.3) and the projected state a correct client ends in. */
export interface ClientTrace {
  readonly name: string;
  /** The server→client frames, one JSON text frame per line, in the order a client received them. */
  readonly jsonl: string;
  readonly expected: unknown;
}

/** Something that turns a trace's frames into a final state projection (JSON). */
export type TraceClient = (trace: ClientTrace) => Promise<unknown>;

export interface Difference {
  readonly path: string;
  readonly expected: unknown;
  readonly seen: unknown;
}

export interface TraceResult {
  readonly name: string;
  readonly passed: boolean;
  /** Where the client's state differs from the expected one (the first few), when it produced one. */
  readonly differences: readonly Difference[];
  /** Why the client produced no state: it exited non-zero, timed out or printed no JSON. */
  readonly error: string | null;
  readonly durationMs: number;
}

/**
 * `test/streaming-conformance/` of this package: the same two levels up from `src/client/conformance`
 * (tests, tsx) and from `dist/client/conformance` (the installed CLI).
 */
export function defaultTracesDir(): string {
  return join(dirname(fileURLToPath(import.meta.url)), '../../../test/streaming-conformance');
}

/** The traces of a folder (`<name>.jsonl` + `<name>.expected.json`), sorted by name. */
export function loadTraces(dir: string, only?: readonly string[]): ClientTrace[] {
  if (!existsSync(dir)) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `--traces: no such folder: ${dir}`);
  }
  const names = readdirSync(dir)
    .filter(
      (file) => file.endsWith('.jsonl') && existsSync(join(dir, file.replace(/\.jsonl$/, '.expected.json'))),
    )
    .map((file) => file.slice(0, -'.jsonl'.length))
    .sort();
  if (names.length === 0) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--traces: ${dir} holds no trace (<name>.jsonl with <name>.expected.json)`,
    );
  }
  const unknown = (only ?? []).filter((name) => !names.includes(name));
  if (unknown.length > 0) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--only: no trace named ${unknown.join(', ')}; the traces are ${names.join(', ')}`,
    );
  }
  return names
    .filter((name) => only === undefined || only.length === 0 || only.includes(name))
    .map((name) => ({
      name,
      jsonl: readFileSync(join(dir, `${name}.jsonl`), 'utf8'),
      expected: JSON.parse(readFileSync(join(dir, `${name}.expected.json`), 'utf8')),
    }));
}

/** metis's own reducer, projected as the traces' expected files are. */
export const builtinClient: TraceClient = async (trace) => {
  let state = initialState;
  for (const line of trace.jsonl.split('\n')) {
    if (line.trim() !== '') state = reduce(state, JSON.parse(line) as Frame);
  }
  // Through JSON, as an external client's output would be: no undefined, no holes.
  return JSON.parse(JSON.stringify(projectState(state)));
};

/**
 * An external client: `command` runs in a shell, reads the frames as JSONL on stdin and writes its
 * final state projection as one JSON document on stdout.
 */
export function commandClient(command: string, timeoutMs: number): TraceClient {
  return async (trace) => {
    const run = await execa(command, { shell: true, input: trace.jsonl, timeout: timeoutMs, reject: false });
    if (run.timedOut) throw new Error(`timed out after ${timeoutMs} ms`);
    if (run.exitCode !== 0) {
      const why = run.signal ? `was killed by ${run.signal}` : `exited with code ${run.exitCode}`;
      throw new Error(`${why}${run.stderr ? `: ${firstLines(run.stderr)}` : ''}`);
    }
    try {
      return JSON.parse(run.stdout);
    } catch {
      throw new Error(`printed no JSON on stdout: ${JSON.stringify(run.stdout.slice(0, 200))}`);
    }
  };
}

/** The head of stderr: where an uncaught error's message is (its stack follows). */
function firstLines(text: string, count = 6): string {
  return text.trim().split('\n').slice(0, count).join('\n');
}

/** Paths where `seen` differs from `expected`, depth first, at most `limit`. */
export function differences(expected: unknown, seen: unknown, limit = 5, path = '$'): Difference[] {
  if (isDeepStrictEqual(expected, seen)) return [];
  const bothArrays = Array.isArray(expected) && Array.isArray(seen);
  const bothObjects = isRecord(expected) && isRecord(seen);
  if (!bothArrays && !bothObjects) return [{ path, expected, seen }];
  const found: Difference[] = [];
  if (bothArrays && expected.length !== seen.length) {
    found.push({ path: `${path}.length`, expected: expected.length, seen: seen.length });
  }
  const keys = bothArrays
    ? Array.from({ length: Math.max(expected.length, seen.length) }, (_, i) => i)
    : [...new Set([...Object.keys(expected as object), ...Object.keys(seen as object)])];
  for (const key of keys) {
    if (found.length >= limit) break;
    const inner = typeof key === 'number' ? `${path}[${key}]` : `${path}.${key}`;
    const a = (expected as Record<string | number, unknown>)[key];
    const b = (seen as Record<string | number, unknown>)[key];
    found.push(...differences(a, b, limit - found.length, inner));
  }
  return found.slice(0, limit);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Feeds every trace to `client` in turn and compares its final state with the expected one. */
export async function runClientConformance(
  traces: readonly ClientTrace[],
  client: TraceClient,
  onResult?: (result: TraceResult, index: number, total: number) => void,
): Promise<TraceResult[]> {
  const results: TraceResult[] = [];
  for (const [index, trace] of traces.entries()) {
    const started = performance.now();
    let result: TraceResult;
    try {
      const seen = await client(trace);
      const found = differences(trace.expected, seen);
      result = {
        name: trace.name,
        passed: found.length === 0,
        differences: found,
        error: null,
        durationMs: 0,
      };
    } catch (error) {
      result = {
        name: trace.name,
        passed: false,
        differences: [],
        error: (error as Error).message,
        durationMs: 0,
      };
    }
    result = { ...result, durationMs: Math.round(performance.now() - started) };
    results.push(result);
    onResult?.(result, index, traces.length);
  }
  return results;
}
