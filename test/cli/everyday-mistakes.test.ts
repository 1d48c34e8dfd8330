import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Mistakes a user makes on day one, each answered with a clear error and exit status instead of a
 * stack trace, a silent fallback or a success that did nothing.
 */
describe('everyday mistakes against `metis serve`', () => {
  it('a port already in use: a second server says so and exits 1, without a stack trace', async () => {
    const home = tempDir();
    const first = await serveCli(home, ['--db', join(home, 'one.db')]);
    const second = await runCli(['serve', '--port', String(first.port), '--db', join(home, 'two.db')], home);
    expect(second.exitCode).toBe(1);
    expect(second.stderr).toMatch(
      new RegExp(`cannot listen on 127\\.0\\.0\\.1:${first.port}: the port is already in use`),
    );
    expect(second.stderr).toMatch(/--port \(0 picks a free one\)/);
    expect(second.stderr).not.toMatch(/internal error|at .*\.ts:\d+/);
    expect(await first.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('a default model no provider can serve stops startup, naming it', async () => {
    const home = tempDir();
    const result = await runCli(
      ['serve', '--port', '0', '--db', join(home, 'metis.db'), '--model', 'nope:x'],
      home,
    );
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toMatch(/default model "nope:x" cannot serve turns \(not_configured\)/);
  }, 60_000);

  it('a trailing slash in --url or $METIS_URL works; a URL that is not one is refused by name', async () => {
    const home = tempDir();
    const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
    const withSlash = await runCli(['send', '--new', 'hello', '--follow', '--url', `${server.url}/`], home);
    expect(withSlash.exitCode, withSlash.stderr).toBe(0);
    expect(withSlash.stdout).toContain('assistant: You said: hello');
    const fromEnv = await runCli(['sessions', '--json'], home, { METIS_URL: `${server.url}//` });
    expect(fromEnv.exitCode, fromEnv.stderr).toBe(0);
    expect(JSON.parse(fromEnv.stdout)).toHaveLength(1);
    const notAUrl = await runCli(['tail', 'sess_x', '--url', 'notaurl'], home);
    expect(notAUrl.exitCode).toBe(2);
    expect(notAUrl.stderr).toMatch(/--url: "notaurl" is not a server URL/);
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('send --follow: a rejected --model is shown, and a failed turn exits 1', async () => {
    const home = tempDir();
    const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
    const rejected = await runCli(
      ['send', '--new', 'hello', '--follow', '--model', 'nope:model', '--url', server.url],
      home,
    );
    expect(rejected.exitCode, rejected.stderr).toBe(0);
    expect(rejected.stdout).toMatch(/nope:model rejected \(not_configured\)\n\s+route → scripted:demo/);
    const failed = await runCli(['send', '--new', 'fail: auth', '--follow', '--url', server.url], home);
    expect(failed.stdout).toMatch(/model call failed \(auth\)/);
    expect(failed.exitCode).toBe(1);
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('plugins --url of a server that does not answer is an error, not the config listing', async () => {
    const home = tempDir();
    const result = await runCli(['plugins', '--url', 'http://127.0.0.1:1'], home);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toMatch(/no metis server answered GET http:\/\/127\.0\.0\.1:1\/plugins/);
  }, 60_000);
});
