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
