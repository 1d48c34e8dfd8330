import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Frame } from '../../src/client/reducer.js';
import { serverToken } from '../helpers/home-token.js';
import { eventually } from '../helpers/protocol.js';
import { type CliChild, runCli, serveCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * `metis sessions`, `send` (without --follow), `cancel`, `confirm`, and `--token` / $METIS_TOKEN on
 * them and on `tail` and `send --follow`: each a real child process against a real `metis serve`.
 */

const TOKEN = 'test-bearer-token-0123456789abcdef';
const ID = (prefix: string) => new RegExp(`^${prefix}_[0-9A-HJKMNP-TV-Z]{26}$`);

interface Served {
  readonly url: string;
  readonly home: string;
  readonly dbPath: string;
  /** A JSON request with the server's token (when it has one). */
  request(method: string, path: string, body?: unknown): Promise<Record<string, any>>;
  createSession(): Promise<string>;
  /** The types of the turn's stored events, once its end is stored. */
  turnEnd(turnId: string): Promise<string>;
}

/** `metis serve --config F` as a child with this config; resolves once it printed its URL. */
async function serve(config: Record<string, unknown>, token?: string): Promise<Served> {
  const home = tempDir();
  const dbPath = join(home, 'metis.db');
  const configPath = join(home, 'metis.config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
  const { url } = server;
  onTestFinished(async () => {
    expect(await server.stop('SIGTERM')).toBe(0);
  });
  const request = async (method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    const bearer = token ?? serverToken(url);
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    const response = await fetch(`${url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return (await response.json()) as Record<string, any>;
  };
  const db = new Database(dbPath, { readonly: true });
  onTestFinished(() => {
    db.close();
  });
  return {
    url,
    home,
    dbPath,
    request,
    createSession: async () => (await request('POST', '/sessions', {})).session_id as string,
    turnEnd: async (turnId) => {
      const end = () =>
        db
          .prepare(
            "SELECT type FROM events WHERE turn_id = ? AND type IN ('turn.completed', 'turn.cancelled')",
          )
          .pluck()
          .get(turnId) as string | undefined;
      expect(await eventually(() => end() !== undefined, 20_000)).toBe(true);
      return end()!;
    },
  };
}

const framesOf = (stdout: string) =>
  stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Frame);
const eventsOf = (stdout: string) => framesOf(stdout).flatMap((f) => (f.type === 'event' ? [f.event] : []));

describe('--token and $METIS_TOKEN against a server with server.bearer_token', () => {
  it('sessions fails clearly without the token and works with --token or $METIS_TOKEN', async () => {
    const s = await serve({ server: { bearer_token: TOKEN } }, TOKEN);
    const sessionId = await s.createSession();

    const without = await runCli(['sessions', '--json', '--url', s.url], s.home);
    expect(without.exitCode).toBe(1);
    expect(without.stdout).toBe('');
    // Under --json the error is JSON on stderr, with the hint.
    const { error } = JSON.parse(without.stderr);
    expect(error.message).toBe('missing or wrong bearer token (METIS_ERR_UNAUTHORIZED)');
    expect(error.hint).toContain('The server at');
    expect(error.hint).toContain('pass --token <token> or set $METIS_TOKEN');
    const plain = await runCli(['sessions', '--url', s.url], s.home);
    expect(plain.stderr).toContain('error: missing or wrong bearer token (METIS_ERR_UNAUTHORIZED)');
    expect(plain.stderr).toContain('hint: The server at');

    const wrong = await runCli(
      ['sessions', '--json', '--url', s.url, '--token', 'not-the-token-at-all'],
      s.home,
    );
    expect(wrong.exitCode).toBe(1);
    expect(wrong.stderr).toContain('refused this bearer token');

    const flag = await runCli(['sessions', '--json', '--url', s.url, '--token', TOKEN], s.home);
    expect(flag).toMatchObject({ exitCode: 0, stderr: '' });
    expect(JSON.parse(flag.stdout).map((r: any) => r.id)).toEqual([sessionId]);

    const env = await runCli(['sessions', '--json', '--url', s.url], s.home, { METIS_TOKEN: TOKEN });
    expect(env).toMatchObject({ exitCode: 0, stdout: flag.stdout });
    // --token wins over $METIS_TOKEN.
    const both = await runCli(['sessions', '--url', s.url, '--token', TOKEN], s.home, {
      METIS_TOKEN: 'not-the-token-at-all',
    });
    expect(both.exitCode).toBe(0);
    expect(both.stdout).toContain(sessionId);
  }, 60_000);

  it('send --new "hello" --follow --token T prints the scripted answer (handshake and upgrade carry it)', async () => {
    const s = await serve({ server: { bearer_token: TOKEN } }, TOKEN);
    const result = await runCli(
      ['send', '--new', 'hello', '--follow', '--url', s.url, '--token', TOKEN],
      s.home,
    );
    expect(result.stderr).toMatch(/^created session sess_\w+$/m);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain('assistant: You said: hello\n');
    expect(result.stdout).toMatch(/■ turn done: 1 model call, 0 tools/);

    const refused = await runCli(['send', '--new', 'hello', '--follow', '--url', s.url], s.home);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain('missing or wrong bearer token');
  }, 60_000);

  it('tail follows with $METIS_TOKEN and exits non-zero with the error without one', async () => {
    const s = await serve({ server: { bearer_token: TOKEN } }, TOKEN);
    const sessionId = await s.createSession();

    const refused = await runCli(['tail', sessionId, '--url', s.url], s.home);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain('error: missing or wrong bearer token (METIS_ERR_UNAUTHORIZED)');

    const tail = spawnCli(['tail', sessionId, '--json', '--url', s.url], s.home, { METIS_TOKEN: TOKEN });
    await tail.waitForStdout((out) => out.includes('"type":"snapshot"'));
    const turnId = (await s.request('POST', `/sessions/${sessionId}/turns`, { message: 'hi' })).turn_id;
    await tail.waitForStdout((out) =>
      eventsOf(out).some((e) => e.type === 'turn.completed' && e.turn_id === turnId),
    );
    expect(await tail.stop('SIGINT')).toBe(0);
  }, 60_000);
});

describe('metis sessions, send, cancel, confirm against a real `metis serve`', () => {
  it('sessions: a hint when there are none; one line per session; --json prints the records', async () => {
    const s = await serve({});
    const empty = await runCli(['sessions', '--url', s.url], s.home);
    expect(empty).toMatchObject({ exitCode: 0, stdout: 'no sessions yet: metis send --new "hello"' });
    expect(await runCli(['sessions', '--json', '--url', s.url], s.home)).toMatchObject({
      exitCode: 0,
      stdout: '[]',
    });

    const first = await s.createSession();
    const second = await s.createSession();
    const human = await runCli(['sessions', '--url', s.url], s.home);
    expect(human.exitCode).toBe(0);
    const [header, ...lines] = human.stdout.split('\n');
    expect(header).toMatch(/^session +status +model +turns +cost +last activity +created +workspace$/);
    // Newest first: id, status, model, turns, cost, last activity, creation time, workspace.
    expect(lines.map((l) => l.split(/\s+/)[0])).toEqual([second, first]);
    const time = '\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z';
    expect(lines[0]).toMatch(
      new RegExp(
        `^${second} {2}active {2}scripted:demo {2}0 {6}\\$0\\.000000 {2}${time} {2}${time} {2}\\S+$`,
      ),
    );

    const json = await runCli(['sessions', '--json', '--url', s.url], s.home);
    expect(json.exitCode).toBe(0);
    const records = JSON.parse(json.stdout) as any[];
    expect(records).toMatchObject([
      { id: second, status: 'active', active_model: 'scripted:demo', parent_session_id: null },
      { id: first, status: 'active', active_model: 'scripted:demo', parent_session_id: null },
    ]);
  }, 60_000);

  it('send <session> "msg" without --follow prints "<session> <turn>" (--json: an object) and the turn runs', async () => {
    const s = await serve({ runtime: { scripted: { token_delay_ms: 0 } } });
    const sessionId = await s.createSession();
    const plain = await runCli(['send', sessionId, 'hello there', '--url', s.url], s.home);
    expect(plain).toMatchObject({ exitCode: 0, stderr: '' });
    const [printedSession, turnId, ...rest] = plain.stdout.split(' ');
    expect(rest).toEqual([]);
    expect(printedSession).toBe(sessionId);
    expect(turnId).toMatch(ID('turn'));
    expect(await s.turnEnd(turnId!)).toBe('turn.completed');
    const { messages } = await s.request('GET', `/sessions/${sessionId}/messages`);
    expect(messages.map((m: any) => [m.role, m.content[0].text])).toEqual([
      ['user', 'hello there'],
      ['assistant', 'You said: hello there'],
    ]);

    const json = await runCli(['send', sessionId, 'again', '--json', '--url', s.url], s.home);
    expect(json.exitCode).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      session_id: sessionId,
      turn_id: expect.stringMatching(ID('turn')),
    });
    await s.turnEnd(JSON.parse(json.stdout).turn_id);

    // --new without --follow: the new session on stderr, the ids on stdout.
    const created = await runCli(['send', '--new', 'hi', '--url', s.url], s.home);
    expect(created.exitCode).toBe(0);
    const newSession = /^created session (sess_\w+)$/.exec(created.stderr)![1]!;
    expect(created.stdout).toMatch(new RegExp(`^${newSession} turn_\\w+$`));

    const unknown = await runCli(['send', 'sess_nope', 'hi', '--url', s.url], s.home);
    expect(unknown.exitCode).toBe(1);
    expect(unknown.stderr).toContain('METIS_ERR_SESSION_NOT_FOUND');
  }, 60_000);

  it('cancel <session> [turn] during a slow turn: the turn ends cancelled', async () => {
    const s = await serve({ runtime: { scripted: { slow_token_delay_ms: 20, slow_tokens: 400 } } });
    const sessionId = await s.createSession();

    // Without a turn id: the session's turn in flight.
    const sent = await runCli(['send', sessionId, 'slow: a long story', '--url', s.url], s.home);
    const turnId = sent.stdout.split(' ')[1]!;
    const cancelled = await runCli(['cancel', sessionId, '--url', s.url], s.home);
    expect(cancelled).toMatchObject({ exitCode: 0, stdout: `${turnId}: cancelling`, stderr: '' });
    expect(await s.turnEnd(turnId)).toBe('turn.cancelled');

    // With the turn id, and --json.
    const second = (
      await runCli(['send', sessionId, 'slow: another story', '--url', s.url], s.home)
    ).stdout.split(' ')[1]!;
    const json = await runCli(['cancel', sessionId, second, '--json', '--url', s.url], s.home);
    expect(json.exitCode).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ turn_id: second, status: 'cancelling' });
    expect(await s.turnEnd(second)).toBe('turn.cancelled');
    const { messages } = await s.request('GET', `/sessions/${sessionId}/messages`);
    expect(messages.filter((m: any) => m.role === 'assistant').map((m: any) => m.status)).toEqual([
      'cancelled',
      'cancelled',
    ]);

    // Nothing in flight any more: a clear error, exit 1.
    const idle = await runCli(['cancel', sessionId, '--url', s.url], s.home);
    expect(idle.exitCode).toBe(1);
    expect(idle.stderr).toContain(`error: session ${sessionId} has no turn in flight`);
    // An ended turn: cancel is idempotent (streaming §6.5), the answer says it had already ended.
    const ended = await runCli(['cancel', sessionId, second, '--url', s.url], s.home);
    expect(ended.exitCode).toBe(0);
    expect(ended.stdout).toContain(`${second}: already_ended`);
    const never = await runCli(['cancel', sessionId, 'turn_never_was', '--url', s.url], s.home);
    expect(never.exitCode).toBe(1);
    expect(never.stderr).toContain('METIS_ERR_TURN_NOT_FOUND');
  }, 60_000);

  it('confirm <session> <request> allow|deny answers a tool that needs confirmation', async () => {
    // runtime.tool_confirmation.execute defaults to "ask": `run:` makes the scripted model call shell.
    const s = await serve({ runtime: { scripted: { token_delay_ms: 0 } } });
    const sessionId = await s.createSession();
    const requested = async (follow: CliChild) => {
      await follow.waitForStdout((out) =>
        eventsOf(out).some((e) => e.type === 'tool.confirmation_requested'),
      );
      const event = eventsOf(follow.stdout()).find((e) => e.type === 'tool.confirmation_requested')!;
      expect(event.payload).toMatchObject({ tool_name: 'shell' });
      return event.payload.confirmation_request_id as string;
    };

    const allowTurn = spawnCli(
      ['send', sessionId, 'run: echo confirmed', '--follow', '--json', '--url', s.url],
      s.home,
    );
    const allowId = await requested(allowTurn);
    expect(allowId).toMatch(ID('conf'));
    const allowed = await runCli(['confirm', sessionId, allowId, 'allow', '--url', s.url], s.home);
    expect(allowed).toMatchObject({ exitCode: 0, stderr: '' });
    expect(allowed.stdout).toContain('    echo confirmed\n');
    expect(allowed.stdout.endsWith(`${allowId}: allow`)).toBe(true);
    expect(await allowTurn.exited()).toBe(0);
    const allowEvents = eventsOf(allowTurn.stdout());
    expect(allowEvents.find((e) => e.type === 'tool.confirmation_resolved')!.payload).toMatchObject({
      decision: 'allow',
    });
    expect(allowEvents.map((e) => e.type)).toContain('tool.completed');
    expect(allowEvents.at(-1)!.type).toBe('turn.completed');

    // The same request again: already answered.
    const again = await runCli(['confirm', sessionId, allowId, 'allow', '--url', s.url], s.home);
    expect(again.exitCode).toBe(1);
    expect(again.stderr).toContain('METIS_ERR_CONFIRMATION_NOT_FOUND');

    const denyTurn = spawnCli(
      ['send', sessionId, 'run: echo denied', '--follow', '--json', '--url', s.url],
      s.home,
    );
    const denyId = await requested(denyTurn);
    // Neither allow nor deny: refused before any request.
    const bad = await runCli(['confirm', sessionId, denyId, 'maybe', '--url', s.url], s.home);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain('decision: "maybe" is not allow or deny');
    const denied = await runCli(['confirm', sessionId, denyId, 'deny', '--json', '--url', s.url], s.home);
    expect(denied.exitCode).toBe(0);
    expect(JSON.parse(denied.stdout)).toMatchObject({
      confirmation_request_id: denyId,
      decision: 'deny',
      shown: { input: { command: 'echo denied' } },
    });
    expect(await denyTurn.exited()).toBe(0);
    const denyEvents = eventsOf(denyTurn.stdout());
    expect(denyEvents.find((e) => e.type === 'tool.failed')!.payload).toMatchObject({
      error_class: 'user_denied',
    });
    expect(denyEvents.map((e) => e.type)).not.toContain('tool.completed');
    expect(denyEvents.at(-1)!.type).toBe('turn.completed');
  }, 60_000);
});
