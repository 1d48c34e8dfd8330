import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 18: `metis end`, `metis route override|dismiss` and `metis patterns clear`, each a real child
 * process against a real `metis serve`, from the scripted model alone.
 */

async function serve() {
  const home = tempDir();
  const dbPath = join(home, 'metis.db');
  const configPath = join(home, 'metis.config.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      runtime: {
        patterns: { min_samples: 1 },
        routing_rules: [{ name: 'slow-on-demo', match: '^slow:', model: 'scripted:demo' }],
        scripted: { token_delay_ms: 0, slow_token_delay_ms: 10 },
      },
    }),
  );
  const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
  onTestFinished(async () => {
    expect(await server.stop('SIGTERM')).toBe(0);
  });
  const db = new Database(dbPath, { readonly: true });
  onTestFinished(() => {
    db.close();
  });
  const count = (type: string, sessionId?: string) =>
    db
      .prepare(`SELECT count(*) FROM events WHERE type = ? ${sessionId ? 'AND session_id = ?' : ''}`)
      .pluck()
      .get(...(sessionId ? [type, sessionId] : [type])) as number;
  const cli = (args: string[]) => runCli([...args, '--url', server.url], home);
  return { cli, count };
}

describe('route, end and patterns commands', () => {
  it('end scores a session; override applies a deferred recommendation; dismiss and clear say what they did', async () => {
    const { cli, count } = await serve();
    const learned = async (message: string, model: string) => {
      const sent = await cli(['send', '--new', message, '--model', model, '--follow']);
      // A turn whose model call failed ends the follower with 1.
      expect(sent.exitCode).toBe(message.startsWith('fail:') ? 1 : 0);
      const sessionId = /created session (sess_\w+)/.exec(sent.stderr)![1]!;
      const ended = await cli(['end', sessionId]);
      expect(ended).toMatchObject({ exitCode: 0, stdout: `session ${sessionId} ended (completed)` });
      expect(await eventually(() => count('pattern.recorded', sessionId) === 1, 20_000)).toBe(true);
      return sessionId;
    };
    const first = await learned('fail: server_error', 'scripted:demo');
    await learned('hello there', 'scripted:smart');
    expect(count('eval.completed', first)).toBe(2); // its turn and the session

    const again = await cli(['end', first, '--json']);
    expect(JSON.parse(again.stdout)).toEqual({
      session_id: first,
      status: 'ended',
      disposition: 'completed',
    });

    const sent = await cli(['send', '--new', 'slow: go']);
    expect(sent.exitCode).toBe(0);
    const [sessionId, turnId] = sent.stdout.trim().split(' ');
    expect(await eventually(() => count('route.decided', sessionId) === 1, 20_000)).toBe(true);
    const override = await cli(['route', 'override', sessionId!]);
    expect(override).toMatchObject({
      exitCode: 0,
      stdout: `turn ${turnId} goes on with scripted:smart (was scripted:demo)`,
    });
    expect(await eventually(() => count('turn.completed', sessionId) === 1, 20_000)).toBe(true);
    expect(count('route.overridden', sessionId)).toBe(1);

    const nothing = await cli(['route', 'dismiss', sessionId!]);
    expect(nothing.exitCode).toBe(1);
    expect(nothing.stderr).toContain('has no pattern recommendation pending');
    expect(nothing.stderr).toContain('METIS_ERR_NO_RECOMMENDATION');

    const cleared = await cli(['patterns', 'clear', '--json']);
    expect(cleared.exitCode).toBe(0);
    expect(JSON.parse(cleared.stdout)).toEqual({ entries_evicted: 2 });

    const unknown = await cli(['end', 'sess_nope']);
    expect(unknown.exitCode).toBe(1);
    expect(unknown.stderr).toContain('no session sess_nope');
  }, 90_000);

  it('--help explains every flag of the new commands', async () => {
    const home = tempDir();
    const end = await runCli(['end', '--help'], home);
    expect(end.stdout).toContain('--abandoned');
    const route = await runCli(['route', '--help'], home);
    expect(route.stdout).toMatch(/override \[options\] <session>\s+apply it/);
    expect(route.stdout).toMatch(/dismiss \[options\] <session>\s+keep the chosen model/);
    const clear = await runCli(['patterns', 'clear', '--help'], home);
    expect(clear.stdout).toContain('forget every learned outcome');
  });
});
