import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { onTestFinished } from 'vitest';
import { cliNodeArgs } from './cli-command.js';
import { rememberServerToken } from './home-token.js';

const ROOT = join(import.meta.dirname, '../..');

export interface CliResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * The environment of every CLI child: its own METIS_HOME, no colour, and the test runner's
 * $METIS_TOKEN and $METIS_URL never leak in.
 */
function cliEnv(home: string, extra: Record<string, string>): Record<string, string> {
  return { METIS_HOME: home, NODE_ENV: 'test', NO_COLOR: '1', METIS_TOKEN: '', METIS_URL: '', ...extra };
}

function execCli(args: readonly string[], home: string, env: Record<string, string>): ResultPromise {
  return execa(process.execPath, [...cliNodeArgs(), ...args], {
    cwd: ROOT,
    reject: false,
    stdin: 'ignore',
    env: cliEnv(home, env),
  });
}

/** Runs `metis <args>` from source as a real child process, to completion, with METIS_HOME `home`. */
export async function runCli(
  args: readonly string[],
  home: string,
  env: Record<string, string> = {},
): Promise<CliResult> {
  const result = await execCli(args, home, env);
  return { exitCode: result.exitCode ?? -1, stdout: String(result.stdout), stderr: String(result.stderr) };
}

export interface CliChild {
  readonly process: ResultPromise;
  readonly pid: number;
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout satisfies `check` (rejects when the process ends first or on timeout). */
  waitForStdout(check: (stdout: string) => boolean, timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code once the child ended by itself. */
  exited(): Promise<number | undefined>;
  /** Sends a signal to this child (by its pid) and resolves with its exit code once it exited. */
  stop(signal: NodeJS.Signals): Promise<number | undefined>;
}

/**
 * `metis <args>` from source as a long-running child process, its output collected as it comes;
 * SIGKILLed when the test finishes if it still runs.
 */
export function spawnCli(args: readonly string[], home: string, env: Record<string, string> = {}): CliChild {
  const child = execCli(args, home, env);
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk) => {
    out += String(chunk);
  });
  child.stderr!.on('data', (chunk) => {
    err += String(chunk);
  });
  let ended = false;
  const done = child.then((result) => {
    ended = true;
    return result;
  });
  onTestFinished(async () => {
    if (!ended) {
      child.kill('SIGKILL');
      await done;
    }
  });
  return {
    process: child,
    pid: child.pid!,
    stdout: () => out,
    stderr: () => err,
    waitForStdout: async (check, timeoutMs = 20_000) => {
      const deadline = Date.now() + timeoutMs;
      while (!check(out)) {
        if (ended) throw new Error(`metis ${args[0]} exited early:\n${out}\n${err}`);
        if (Date.now() > deadline) throw new Error(`timed out waiting for metis ${args[0]}:\n${out}\n${err}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    exited: async () => (await done).exitCode,
    stop: async (signal) => {
      if (!ended) child.kill(signal);
      return (await done).exitCode;
    },
  };
}

/**
 * `metis serve --port <port> --json <args>` as a child; resolves once it printed its URL. Its token
 * (its `token_file`, `<home>/token`, when it uses one) is remembered for `jsonRequest`.
 */
export async function serveCli(
  home: string,
  args: readonly string[],
  port = 0,
): Promise<CliChild & { url: string; port: number }> {
  const server = spawnCli(['serve', '--port', String(port), '--json', ...args], home);
  await server.waitForStdout((out) => out.includes('\n'), 30_000);
  const banner = JSON.parse(server.stdout().split('\n')[0]!) as { url: string; token_file?: string | null };
  const url = banner.url;
  if (banner.token_file) rememberServerToken(url, banner.token_file);
  return Object.assign(server, { url, port: Number(new URL(url).port) });
}
