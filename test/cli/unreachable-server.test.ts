import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** A URL where a metis server was and no longer is: the connection is refused. */
async function deadUrl(): Promise<string> {
  const t = await startTestServer();
  const url = t.url;
  await t.server.close();
  return url;
}

describe('followers against a server that never answers (issue 17 obs. 3)', () => {
  it('tail and send --follow fail at once, naming the URL, with the hint to start one', async () => {
    const url = await deadUrl();
    for (const args of [
      ['tail', 'sess_nowhere', '--url', url],
      ['send', 'sess_nowhere', 'hello', '--follow', '--url', url],
    ]) {
      const started = Date.now();
      const result = await runCli(args, tempDir());
      expect(result.exitCode, args.join(' ')).toBe(1);
      expect(result.stderr).toContain(`error: cannot reach a metis server at ${url}`);
      expect(result.stderr).toContain('hint: Start one with `metis serve`');
      // No retries: a refused connection is answered at once (generous bound for a loaded CI machine).
      expect(Date.now() - started).toBeLessThan(15_000);
    }
  }, 60_000);
});

describe('errors under --json are JSON on stderr (issue 17 obs. 7)', () => {
  it('a command error: one JSON line with the code, message, hint and exit code; nothing on stdout', async () => {
    const url = await deadUrl();
    const result = await runCli(['tail', 'sess_nowhere', '--url', url, '--json'], tempDir());
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toBe('');
    const lines = result.stderr.trim().split('\n');
    const last = JSON.parse(lines.at(-1)!);
    expect(last).toEqual({
      error: {
        code: 'METIS_ERR_SERVER_UNREACHABLE',
        message: expect.stringContaining(`cannot reach a metis server at ${url}`),
        hint: expect.stringContaining('metis serve'),
        exit_code: 1,
      },
    });
  }, 30_000);

  it('a usage error: JSON too, exit 2', async () => {
    const result = await runCli(['tail', '--json'], tempDir());
    expect(result.exitCode).toBe(2);
    expect(JSON.parse(result.stderr.trim())).toEqual({
      error: {
        code: 'METIS_ERR_INVALID_ARGUMENT',
        message: "missing required argument 'session'",
        hint: 'Run the command with --help.',
        exit_code: 2,
      },
    });
  }, 30_000);
});
