import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import {
  builtinClient,
  commandClient,
  defaultTracesDir,
  loadTraces,
  runClientConformance,
} from '../client/conformance/client-traces.js';
import { toJunit } from '../client/conformance/junit.js';
import { type CheckResult, runConformance } from '../client/conformance/runner.js';
import { startService } from '../core/app/start-service.js';
import { MetisConfigSchema } from '../core/config/schema.js';
import { MetisError } from '../core/errors.js';
import { silentLogger } from '../core/logger.js';
import type { FaultName } from '../core/stream/faults.js';
import { serverUrl, tokenFrom } from './api-request.js';
import { ExitError } from './exit-error.js';

export interface ConformanceRunOptions {
  url?: string;
  sessionsUrl?: string;
  only?: string[];
  json?: boolean;
  junit?: string;
  fault?: string[];
  token?: string;
  transport?: 'websocket' | 'sse';
}

function describe(result: CheckResult): string {
  const { outcome } = result;
  if (outcome.status === 'pass')
    return `PASS  ${result.name}  (${result.durationMs} ms)${outcome.detail ? `  ${outcome.detail}` : ''}`;
  if (outcome.status === 'skip') return `SKIP  ${result.name}: ${outcome.reason}`;
  const lines = [`FAIL  ${result.name}  [${result.covers}]: ${outcome.message}`];
  if (outcome.expected !== undefined) lines.push(`      expected: ${JSON.stringify(outcome.expected)}`);
  if (outcome.seen !== undefined) lines.push(`      seen:     ${JSON.stringify(outcome.seen)}`);
  return lines.join('\n');
}

/** `metis conformance run`: against --url, or an embedded server on a temporary database. */
export async function conformanceRunCommand(options: ConformanceRunOptions): Promise<void> {
  const faults = options.fault ?? [];
  if (faults.length > 0 && options.url)
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', '--fault: only for the embedded server (no --url)');
  if (options.junit) checkWritableFile('--junit', options.junit);
  if (options.sessionsUrl !== undefined && options.url === undefined)
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      '--sessions-url: only with --url (a server to run against)',
    );
  const sessionsUrl = options.sessionsUrl === undefined ? undefined : serverUrl(options.sessionsUrl);
  let stop = async () => {};
  let url = options.url === undefined ? undefined : serverUrl(options.url);
  let token = url === undefined ? undefined : tokenFrom(options);
  if (!url) {
    const home = mkdtempSync(join(tmpdir(), 'metis-conformance-'));
    const config = MetisConfigSchema.parse({ server: { port: 0 } });
    const service = await startService(config, join(home, 'metis.db'), silentLogger(), {
      conformance: { faults: faults as FaultName[] },
      tokenFile: join(home, 'token'),
    });
    url = service.url;
    token = service.auth.token ?? undefined;
    stop = async () => {
      await service.stop();
      rmSync(home, { recursive: true, force: true });
    };
    if (!options.json)
      console.error(`embedded server ${url}${faults.length ? ` with faults: ${faults.join(', ')}` : ''}`);
  }
  const progress = process.stderr.isTTY === true;
  let results: CheckResult[];
  try {
    results = await runConformance({
      url,
      sessionsUrl,
      only: options.only,
      token,
      transport: options.transport,
      onProgress: ({ phase, index, total, name, result }) => {
        if (phase === 'start' && progress) process.stderr.write(`\r[${index + 1}/${total}] ${name}…\u001b[K`);
        if (phase === 'end' && result && !options.json) {
          if (progress) process.stderr.write('\r\u001b[K');
          console.log(describe(result));
        }
      },
    });
  } catch (error) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', (error as Error).message);
  } finally {
    await stop();
  }
  if (options.junit) writeFileSync(options.junit, toJunit(results));
  const failed = results.filter((r) => r.outcome.status === 'fail').length;
  const passed = results.filter((r) => r.outcome.status === 'pass').length;
  const skipped = results.length - failed - passed;
  if (options.json)
    console.log(
      JSON.stringify(
        { url, transport: options.transport ?? 'websocket', passed, failed, skipped, results },
        null,
        2,
      ),
    );
  else console.log(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
  if (failed > 0) throw new ExitError(1);
}

export interface ConformanceClientOptions {
  cmd?: string;
  traces?: string;
  only?: string[];
  json?: boolean;
  timeout?: string;
}

/** `metis conformance client`: feeds the recorded traces to a client and compares its final state. */
export async function conformanceClientCommand(options: ConformanceClientOptions): Promise<void> {
  const timeoutMs = Number(options.timeout ?? 10_000);
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `--timeout: "${options.timeout}" is not a positive integer`,
    );
  }
  const traces = loadTraces(options.traces ?? defaultTracesDir(), options.only);
  const client = options.cmd ? commandClient(options.cmd, timeoutMs) : builtinClient;
  const label = options.cmd ? `"${options.cmd}"` : 'the built-in reducer';
  if (!options.json) console.error(`checking ${label} against ${traces.length} traces`);
  const results = await runClientConformance(traces, client, (result) => {
    if (options.json) return;
    if (result.passed) {
      console.log(`PASS  ${result.name}  (${result.durationMs} ms)`);
      return;
    }
    console.log(`FAIL  ${result.name}: ${result.error ?? 'the final state differs'}`);
    for (const { path, expected, seen } of result.differences) {
      console.log(`      at ${path}`);
      console.log(`        expected: ${JSON.stringify(expected)}`);
      console.log(`        seen:     ${JSON.stringify(seen)}`);
    }
  });
  const failed = results.filter((r) => !r.passed).length;
  const passed = results.length - failed;
  if (options.json)
    console.log(JSON.stringify({ client: options.cmd ?? 'builtin', passed, failed, results }, null, 2));
  else console.log(`\n${passed} passed, ${failed} failed`);
  if (failed > 0) throw new ExitError(1);
}

/** Fails before the suite runs, not after it, when the report could not be written. */
function checkWritableFile(flag: string, path: string): void {
  const folder = dirname(resolve(path));
  if (!existsSync(folder) || !statSync(folder).isDirectory()) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `${flag}: the folder ${folder} does not exist`);
  }
  if (existsSync(path) && statSync(path).isDirectory()) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `${flag}: ${path} is a folder; name a file in it`);
  }
}
