import { chmodSync, existsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { homeToken } from '../helpers/home-token.js';
import { jsonRequest } from '../helpers/http.js';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 13, observation 2: on loopback another account on the machine (`nobody`) approved a shell
 * command over HTTP and it ran as the server's user. The local token, on by default, stops that;
 * client commands of the server's own account read it by themselves.
 */

const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((candidate) => existsSync(candidate));
const asNobodyReason =
  process.getuid?.() !== 0
    ? 'not running as root, so no child can be started as another account'
    : SETPRIV === undefined
      ? 'setpriv (util-linux) is missing, so no child can be started as another account'
      : null;
if (asNobodyReason !== null) console.warn(`local-auth "nobody" test skipped: ${asNobodyReason}`);

/** What the other account tries: read the token, list sessions, start a turn, approve the confirmation. */
const NOBODY_SCRIPT = `
const [url, tokenFile, sessionId, confirmationId] = process.argv.slice(1);
const out = {};
try { require('node:fs').readFileSync(tokenFile, 'utf8'); out.read = 'ok'; } catch (e) { out.read = e.code; }
const post = (path, body) => fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
(async () => {
  out.sessions = (await fetch(url + '/sessions')).status;
  out.turn = (await post('/sessions/' + sessionId + '/turns', { message: 'run: id' })).status;
  out.confirm = (await post('/sessions/' + sessionId + '/confirmations/' + confirmationId, { decision: 'allow', scope: 'once' })).status;
  out.query = (await fetch(url + '/sessions?token=guessed-' + 'x'.repeat(40))).status;
  console.log(JSON.stringify(out));
})();
`;

function eventsOfType(dbPath: string, type: string): Record<string, any>[] {
  const db = new Database(dbPath, { readonly: true });
  try {
    return (db.prepare('SELECT payload_json FROM events WHERE type = ?').pluck().all(type) as string[]).map(
      (payload) => JSON.parse(payload) as Record<string, any>,
    );
  } finally {
    db.close();
  }
}

describe('metis serve: a local token on by default (issue 13, observation 2)', () => {
  it.skipIf(asNobodyReason !== null)(
    'another account gets 401 on sessions, turns and confirmations, and the shell command never runs',
    async () => {
      const home = tempDir('metis-home-');
      // The folder is open to others on purpose: only the token file's own mode keeps them out.
      chmodSync(home, 0o755);
      const dbPath = join(home, 'metis.db');
      const marker = join(home, 'ran-as-server-user');
      const server = await serveCli(home, ['--db', dbPath]);
      const sessionId = (await jsonRequest(server.url, 'POST', '/sessions', { workspace_path: home })).body
        .session_id as string;
      const turn = await jsonRequest(server.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: `run: touch ${marker}`,
      });
      expect(turn.status).toBe(202);
      expect(
        await eventually(() => eventsOfType(dbPath, 'tool.confirmation_requested').length === 1, 20_000),
      ).toBe(true);
      const confirmationId = eventsOfType(dbPath, 'tool.confirmation_requested')[0]!
        .confirmation_request_id as string;

      const nobody = await execa(
        SETPRIV!,
        [
          '--reuid=nobody',
          '--regid=nogroup',
          '--clear-groups',
          process.execPath,
          '-e',
          NOBODY_SCRIPT,
          server.url,
          join(home, 'token'),
          sessionId,
          confirmationId,
        ],
        { reject: false, cwd: '/', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } },
      );
      expect(nobody.stderr).toBe('');
      expect(JSON.parse(nobody.stdout)).toEqual({
        read: 'EACCES',
        sessions: 401,
        turn: 401,
        confirm: 401,
        query: 401,
      });
      expect(eventsOfType(dbPath, 'tool.confirmation_resolved')).toEqual([]);
      expect(existsSync(marker)).toBe(false);

      // The server's own account answers it with no flag at all: the CLI reads $METIS_HOME/token.
      const denied = await runCli(['confirm', sessionId, confirmationId, 'deny', '--url', server.url], home);
      expect(denied.stderr).toBe('');
      expect(denied.exitCode).toBe(0);
      expect(existsSync(marker)).toBe(false);
      expect(await server.stop('SIGTERM')).toBe(0);
    },
    60_000,
  );

  it('client commands of the same account need no flag; the token file is 0600, stable, never printed', async () => {
    const home = tempDir('metis-home-');
    const dbPath = join(home, 'metis.db');
    const human = spawnCli(['serve', '--port', '0', '--db', dbPath], home);
    await human.waitForStdout((out) => out.includes('Press Ctrl-C'), 30_000);
    const tokenFile = join(home, 'token');
    const token = homeToken(home);
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/); // 32 random bytes, base64url
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    expect(human.stdout()).toContain(`auth      token in ${tokenFile}`);
    expect(human.stdout() + human.stderr()).not.toContain(token);
    const url = /metis serving on (\S+)/.exec(human.stdout())![1]!;

    expect((await fetch(`${url}/sessions`)).status).toBe(401);
    expect((await fetch(`${url}/healthz`)).status).toBe(200); // reveals nothing, stays open
    const sent = await runCli(['send', '--new', 'hello', '--json', '--url', url], home);
    expect(sent.stderr).toBe('');
    expect(sent.exitCode).toBe(0);
    const listed = await runCli(['sessions', '--json', '--url', url], home);
    expect(listed.exitCode).toBe(0);
    expect(JSON.parse(listed.stdout)).toHaveLength(1);
    const plugins = await runCli(['plugins', '--json', '--url', url], home);
    expect(plugins.exitCode).toBe(0);
    expect(JSON.parse(plugins.stdout)).toMatchObject({ source: 'server' });
    expect(await human.stop('SIGTERM')).toBe(0);

    // A restart keeps the token, and --json says where it is (never what it is).
    const again = await serveCli(home, ['--db', dbPath]);
    const banner = JSON.parse(again.stdout().split('\n')[0]!);
    expect(banner).toMatchObject({ auth: 'token', token_source: 'file', token_file: tokenFile });
    expect(again.stdout()).not.toContain(token);
    expect(homeToken(home)).toBe(token);
    expect(await again.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('refuses a token file that group or others can read, as ssh does', async () => {
    const home = tempDir('metis-home-');
    const tokenFile = join(home, 'token');
    writeFileSync(tokenFile, 'a-token-someone-made-readable-0123456789\n', { mode: 0o644 });
    chmodSync(tokenFile, 0o644);
    const result = await runCli(['serve', '--port', '0', '--db', join(home, 'metis.db')], home);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`token file ${tokenFile} is readable by other users (mode 644)`);
    expect(result.stderr).toContain('chmod 600');
    expect(result.stderr).not.toContain('a-token-someone-made-readable');
    expect(existsSync(`${join(home, 'metis.db')}.lock`)).toBe(false);
  });

  it('server.auth: none needs no token on loopback, with a WARNING, and is refused on 0.0.0.0', async () => {
    const home = tempDir('metis-home-');
    const configPath = join(home, 'metis.config.json');
    writeFileSync(configPath, JSON.stringify({ server: { auth: 'none' } }));
    const human = spawnCli(
      ['serve', '--port', '0', '--config', configPath, '--db', join(home, 'a.db')],
      home,
    );
    await human.waitForStdout((out) => out.includes('Press Ctrl-C'), 30_000);
    expect(human.stdout()).toMatch(/auth\s+none\n\s+WARNING\s+server\.auth: none: no token/);
    const url = /metis serving on (\S+)/.exec(human.stdout())![1]!;
    expect((await fetch(`${url}/sessions`)).status).toBe(200);
    expect(existsSync(join(home, 'token'))).toBe(false);
    expect(await human.stop('SIGTERM')).toBe(0);

    const json = await serveCli(home, ['--config', configPath, '--db', join(home, 'b.db')]);
    expect(JSON.parse(json.stdout().split('\n')[0]!)).toMatchObject({
      auth: 'none',
      token_file: null,
      auth_warning: expect.stringMatching(/^server\.auth: none/),
    });
    expect(await json.stop('SIGTERM')).toBe(0);

    const wide = await runCli(
      ['serve', '--port', '0', '--host', '0.0.0.0', '--config', configPath, '--db', join(home, 'c.db')],
      home,
    );
    expect(wide.exitCode).toBe(2);
    expect(wide.stderr).toContain('server.auth: "none" is only allowed on a loopback address');
    expect(existsSync(join(home, 'c.db'))).toBe(false);
  }, 60_000);
});
