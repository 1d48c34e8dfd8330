import { cancelChecks } from './checks-cancel.js';
import { cancelAnswerChecks } from './checks-cancel-answers.js';
import { frameChecks } from './checks-frames.js';
import { snapshotPointChecks } from './checks-snapshot-point.js';
import { type Check, streamChecks } from './checks-stream.js';
import { invariantChecks, transportChecks } from './checks-transport.js';
import {
  CheckContext,
  CheckFailure,
  type CheckOutcome,
  type ConformanceInfo,
  type Transport,
} from './context.js';

/** Every check, in the order they run; the invariant checks come last and read what the others recorded. */
export const ALL_CHECKS: readonly Check[] = [
  ...streamChecks,
  ...cancelChecks,
  ...cancelAnswerChecks,
  ...transportChecks,
  ...frameChecks,
  ...snapshotPointChecks,
  ...invariantChecks,
];

export interface CheckResult {
  readonly name: string;
  readonly covers: string;
  readonly outcome: CheckOutcome;
  readonly durationMs: number;
}

export interface RunOptions {
  readonly url: string;
  /** Where each check's session is made (a cluster node other than `url`'s): its turns run there. */
  readonly sessionsUrl?: string;
  readonly only?: readonly string[];
  readonly token?: string;
  /** The transport the checks run over (default the WebSocket). */
  readonly transport?: Transport;
  readonly onProgress?: (event: {
    phase: 'start' | 'end';
    index: number;
    total: number;
    name: string;
    result?: CheckResult;
  }) => void;
}

const CHECK_TIMEOUT_MS = 60_000;

/**
 * Runs the server conformance checks against any server that speaks the metis protocol. Checks that
 * need the server's cooperation use the `--conformance` hooks and are skipped, with the reason, when
 * the server has none.
 */
export async function runConformance(options: RunOptions): Promise<CheckResult[]> {
  const known = new Set(ALL_CHECKS.map((c) => c.name));
  const unknown = (options.only ?? []).filter((name) => !known.has(name));
  if (unknown.length > 0)
    throw new Error(`unknown checks: ${unknown.join(', ')} (known: ${[...known].join(', ')})`);
  const checks = options.only?.length
    ? ALL_CHECKS.filter((c) => options.only!.includes(c.name) || c.name.startsWith('invariant_'))
    : ALL_CHECKS;
  const info = await fetchInfo(options.url, options.token);
  const transport = options.transport ?? 'websocket';
  const ctx = new CheckContext(options.url, info, options.token, transport, options.sessionsUrl);
  const results: CheckResult[] = [];
  try {
    for (const [index, check] of checks.entries()) {
      options.onProgress?.({ phase: 'start', index, total: checks.length, name: check.name });
      const started = performance.now();
      const outcome =
        transport === 'sse' && check.sse !== true
          ? ({
              status: 'skip',
              reason: 'WebSocket only: client frames, pings or a subscribe on an open socket',
            } as const)
          : await runOne(check, ctx, info);
      ctx.closeAll();
      const result = {
        name: check.name,
        covers: check.covers,
        outcome,
        durationMs: Math.round(performance.now() - started),
      };
      results.push(result);
      options.onProgress?.({ phase: 'end', index, total: checks.length, name: check.name, result });
    }
  } finally {
    await ctx.endSessions();
  }
  return results;
}

async function runOne(check: Check, ctx: CheckContext, info: ConformanceInfo | null): Promise<CheckOutcome> {
  if (check.needsHooks && info === null) {
    return { status: 'skip', reason: "needs the server's test hooks (metis serve --conformance)" };
  }
  let timer: NodeJS.Timeout | undefined;
  try {
    const detail = await Promise.race([
      check.run(ctx),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new CheckFailure(`did not finish within ${CHECK_TIMEOUT_MS / 1000} s`)),
          CHECK_TIMEOUT_MS,
        );
      }),
    ]);
    return { status: 'pass', detail };
  } catch (error) {
    if (error instanceof CheckFailure)
      return { status: 'fail', message: error.message, expected: error.expected, seen: error.seen };
    return { status: 'fail', message: (error as Error).message ?? String(error) };
  } finally {
    clearTimeout(timer);
  }
}

async function fetchInfo(url: string, token?: string): Promise<ConformanceInfo | null> {
  const response = await fetch(`${url}/_conformance`, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
  }).catch(() => null);
  if (response === null) throw new Error(`cannot reach ${url}`);
  if (!response.ok) return null;
  return (await response.json()) as ConformanceInfo;
}
