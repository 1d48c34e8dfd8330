import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { cliNodeArgs } from '../helpers/cli-command.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** tsx by its own path: from a project folder outside this repository, `--import tsx` would not resolve. */

/** `metis <args>` run from `cwd`, as a user in their project folder. */
async function metisIn(cwd: string, args: readonly string[]) {
  const result = await execa(process.execPath, [...cliNodeArgs(), ...args], {
    cwd,
    reject: false,
    stdin: 'ignore',
    env: { METIS_HOME: tempDir(), NO_COLOR: '1', METIS_TOKEN: '', METIS_URL: '' },
  });
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr) };
}

describe("client commands use the config's server section (issue 17 obs. 7 and 9)", () => {
  it('sessions and send reach the host and port of metis.config.yaml found from the current folder', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const project = tempDir();
    writeFileSync(
      join(project, 'metis.config.yaml'),
      `server:\n  host: 127.0.0.1\n  port: ${t.server.port}\n`,
    );
    const sessions = await metisIn(project, ['sessions', '--json']);
    expect(sessions.stderr).toBe('');
    expect(JSON.parse(sessions.stdout).map((s: { id: string }) => s.id)).toContain(sessionId);
    const sent = await metisIn(project, ['send', sessionId, 'hello', '--json']);
    expect(sent.exitCode).toBe(0);
    expect(JSON.parse(sent.stdout).session_id).toBe(sessionId);
    // --url still wins over the config.
    const elsewhere = await metisIn(project, ['sessions', '--url', 'http://127.0.0.1:9']);
    expect(elsewhere.exitCode).toBe(1);
    expect(elsewhere.stderr).toContain('cannot reach a metis server at http://127.0.0.1:9');
  }, 60_000);

  it('a config with a YAML error is named in the message', async () => {
    const project = tempDir();
    writeFileSync(join(project, '.metisrc.yaml'), 'server:\n  port: [1, 2\n');
    const result = await metisIn(project, ['sessions']);
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/^error: cannot read config: YAML Error in .*\.metisrc\.yaml/m);
  }, 30_000);
});

describe('metis plugins against a server that refuses the token (issue 17 obs. 9)', () => {
  it('says the token is missing, not that no server runs', async () => {
    const token = 'a-long-enough-test-token-1234';
    const t = await startTestServer({}, { bearerToken: token });
    const result = await metisIn(tempDir(), ['plugins', '--url', t.url]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain('(METIS_ERR_UNAUTHORIZED)');
    expect(result.stderr).toContain(`The server at ${t.url} requires a bearer token`);
    expect(result.stderr).not.toContain('no metis server answered');
  }, 30_000);
});
