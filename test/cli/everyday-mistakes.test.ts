import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sessionCreated } from '../helpers/events.js';
import { runCli, serveCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

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
    // A refusal the CLI knows comes with its own hint, not "see the message".
    const unknown = await runCli(['send', 'sess_nope', 'hello', '--url', server.url], home);
    expect(unknown.exitCode).toBe(1);
    expect(unknown.stderr).toMatch(/METIS_ERR_SESSION_NOT_FOUND/);
    expect(unknown.stderr).toMatch(/List sessions with `metis sessions`/);
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
    expect(rejected.stdout).toMatch(
      /nope:model rejected \(not_configured: no provider "nope" in the config \(providers: [^)]*\)\)\n\s+route → scripted:demo/,
    );
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

describe('everyday mistakes with files and folders', () => {
  it('a folder where a file is expected is named as a folder, not a disk I/O error or "already exists"', async () => {
    const home = tempDir();
    const folder = join(home, 'a-folder');
    mkdirSync(folder);
    const context = tempTraceContext({ dbPath: join(home, 'metis.db') });
    context.bus.emit(sessionCreated('sess_one'));
    await context.close();
    const db = join(home, 'metis.db');

    const stats = await runCli(['trace', 'stats', '--db', folder], home);
    expect(stats.exitCode).not.toBe(0);
    expect(stats.stderr).toMatch(/a-folder is a folder; name the database file in it/);
    const backup = await runCli(['backup', folder, '--db', db], home);
    expect(backup.exitCode).not.toBe(0);
    expect(backup.stderr).toMatch(/a-folder is a folder; name the backup file to create in it/);
    const exported = await runCli(['export', '--db', db, '--out', folder], home);
    expect(exported.exitCode).not.toBe(0);
    expect(exported.stderr).toMatch(/--out: .*a-folder is a folder/);
    const restore = await runCli(['restore', folder, '--db', join(home, 'target.db')], home);
    expect(restore.exitCode).not.toBe(0);
    expect(restore.stderr).toMatch(/a-folder is a folder, not a backup file; nothing was changed/);
    for (const result of [stats, backup, exported, restore])
      expect(result.stderr).not.toMatch(/internal error/);

    // An unknown --session is named, not exported as nothing.
    const unknownSession = await runCli(['export', '--db', db, '--session', 'sess_nope'], home);
    expect(unknownSession.exitCode).toBe(1);
    expect(unknownSession.stderr).toMatch(/--session: no session sess_nope in /);
    expect(unknownSession.stdout).toBe('');

    // And the count a user means: their sessions, the system session named apart.
    const text = await runCli(['trace', 'stats', '--db', db], home);
    expect(text.stdout).toMatch(/^sessions: 1 \(plus the system session\)$/m);
  }, 60_000);

  it('conformance run --junit into a missing folder fails before the suite runs', async () => {
    const home = tempDir();
    writeFileSync(join(home, 'not-a-folder'), '');
    for (const path of [join(home, 'missing', 'x.xml'), join(home, 'not-a-folder', 'x.xml'), home]) {
      const result = await runCli(['conformance', 'run', '--junit', path], home);
      expect(result.exitCode, path).toBe(2);
      expect(result.stderr).toMatch(/^error: --junit: /m);
      expect(result.stdout).not.toMatch(/PASS|FAIL/);
    }
  }, 60_000);
});

describe('commands printed for the user reach the server they were printed for', () => {
  it('send --follow prints the confirm command with --url; demo cleans up on Ctrl-C', async () => {
    const home = tempDir();
    const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
    const send = spawnCli(['send', '--new', 'run: ls', '--follow', '--url', server.url], home);
    await send.waitForStdout((out) => out.includes('metis confirm'), 30_000);
    expect(send.stdout()).toMatch(
      new RegExp(
        `metis confirm sess_\\w+ conf_\\w+ allow\\|deny --url ${server.url.replaceAll('.', '\\.')}\n`,
      ),
    );
    await send.stop('SIGINT');
    expect(await server.stop('SIGTERM')).toBe(0);

    // The demo's server is the only one: the command it prints names it too. Ctrl-C removes its files.
    const demo = spawnCli(['demo', '--message', 'run: ls'], home);
    await demo.waitForStdout((out) => out.includes('metis confirm'), 30_000);
    const folder = /\(database in (\S+)\)/.exec(demo.stdout())![1]!;
    expect(demo.stdout()).toMatch(/allow\|deny --url http:\/\/127\.0\.0\.1:\d+\n/);
    expect(existsSync(folder)).toBe(true);
    expect(await demo.stop('SIGINT')).toBe(130);
    expect(existsSync(folder)).toBe(false);
  }, 90_000);
});
