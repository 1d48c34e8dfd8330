import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runConformance } from '../../src/client/conformance/runner.js';
import { homeToken } from '../helpers/home-token.js';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';
import { otlpReceiver } from '../plugins/receivers.js';

/**
 * Issue 35, store-port step 8: `metis serve --store postgres://…` with `store.working_copy: false` runs on
 * PostgreSQL alone. Turns run and are read back from the store, nothing is written into the data folder
 * but the token and the tool-process record, a restart goes on where it was, and a process killed mid
 * turn has that turn closed once at the next start. Plugins run on it, reading the trace from PostgreSQL.
 */
const pg = postgresForFile();

function psqlIn(url: string, sql: string): string {
  return pg.psql(sql, new URL(url).pathname.slice(1)).trim();
}

/** A data folder with a config turning the working copy off (and slow turns slow enough to kill). */
function home(extra: Record<string, unknown> = {}): { home: string; args: string[] } {
  const dir = tempDir();
  const configPath = join(dir, 'metis.config.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      store: { working_copy: false },
      runtime: { scripted: { slow_tokens: 4000 }, on_restart: 'fail' },
      ...extra,
    }),
  );
  return { home: dir, args: ['--config', configPath] };
}

describe.runIf(postgresTestsRun)('metis serve on PostgreSQL with no working copy', () => {
  it('serves turns from PostgreSQL alone, keeps no file of the store, and goes on after a restart', async () => {
    const url = freshDatabase(pg);
    const data = home();
    const first = await serveCli(data.home, [...data.args, '--store', url]);
    const banner = JSON.parse(first.stdout().split('\n')[0]!) as { store: string; db: string };
    expect(banner.store).toContain('postgres://');
    expect(banner.db).toBe('');
    const session = (await jsonRequest(first.url, 'POST', '/sessions', {})).body.session_id as string;
    const started = await jsonRequest(first.url, 'POST', `/sessions/${session}/turns`, { message: 'hello' });
    expect(started.status).toBe(202);
    await expect
      .poll(() => psqlIn(url, `SELECT count(*) FROM events WHERE type = 'turn.completed'`), {
        timeout: 15_000,
      })
      .toBe('1');
    expect(await first.stop('SIGTERM')).toBe(0);
    expect(readdirSync(data.home).filter((name) => name.endsWith('.db'))).toEqual([]);

    const second = await serveCli(data.home, [...data.args, '--store', url]);
    const again = await jsonRequest(second.url, 'GET', `/sessions/${session}`);
    expect(again.status).toBe(200);
    expect(again.body.session.turn_count).toBe(1);
    const next = await jsonRequest(second.url, 'POST', `/sessions/${session}/turns`, { message: 'again' });
    expect(next.status).toBe(202);
    await expect
      .poll(() => psqlIn(url, `SELECT count(*) FROM events WHERE type = 'turn.completed'`), {
        timeout: 15_000,
      })
      .toBe('2');
    expect(await second.stop('SIGTERM')).toBe(0);
    // Per session, seq is 1..n with no hole or repeat.
    expect(
      psqlIn(
        url,
        `SELECT count(*) FROM (SELECT session_id, count(*) AS n, count(DISTINCT seq) AS d, max(seq) AS top
           FROM events WHERE session_id <> 'system' GROUP BY session_id) s WHERE n <> top OR d <> n`,
      ),
    ).toBe('0');
  }, 60_000);

  it('passes the whole conformance suite', async () => {
    const url = freshDatabase(pg);
    const data = home();
    const server = await serveCli(data.home, [...data.args, '--conformance', '--store', url]);
    const results = await runConformance({ url: server.url, token: homeToken(data.home) });
    expect(results.filter((result) => result.outcome.status !== 'pass')).toEqual([]);
    expect(results.length).toBeGreaterThanOrEqual(20);
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 180_000);

  it('a turn cut by a killed server is closed once at the next start', async () => {
    const url = freshDatabase(pg);
    const data = home();
    const first = await serveCli(data.home, [...data.args, '--store', url]);
    const session = (await jsonRequest(first.url, 'POST', '/sessions', {})).body.session_id as string;
    await jsonRequest(first.url, 'POST', `/sessions/${session}/turns`, { message: 'slow: a long answer' });
    await expect
      .poll(() => psqlIn(url, `SELECT count(*) FROM events WHERE type = 'turn.started'`), { timeout: 10_000 })
      .toBe('1');
    await first.stop('SIGKILL');
    const ends = () =>
      psqlIn(url, `SELECT count(*) FROM events WHERE type IN ('turn.completed', 'turn.cancelled')`);
    expect(ends()).toBe('0');
    const second = await serveCli(data.home, [...data.args, '--store', url]);
    expect(ends()).toBe('1');
    const answer = await jsonRequest(second.url, 'GET', `/sessions/${session}`);
    expect(answer.status).toBe(200);
    expect(answer.body.session.current_turn_id).toBeNull();
    expect(await second.stop('SIGTERM')).toBe(0);
    expect(ends()).toBe('1');
  }, 60_000);

  it('runs the configured plugins: otel exports the turn with its children linked and content read from PostgreSQL', async () => {
    const url = freshDatabase(pg);
    const otlp = await otlpReceiver();
    const data = home({
      plugins: [['otel', { endpoint: otlp.endpoint, scheduled_delay_ms: 50, capture_content: true }]],
    });
    const server = await serveCli(data.home, [...data.args, '--store', url]);
    const token = homeToken(data.home);
    const session = (await jsonRequest(server.url, 'POST', '/sessions', { workspace_path: data.home })).body
      .session_id as string;
    const started = await jsonRequest(server.url, 'POST', `/sessions/${session}/turns`, { message: 'time' });
    expect(started.status).toBe(202);
    await expect
      .poll(() => psqlIn(url, `SELECT count(*) FROM events WHERE type = 'turn.completed'`), {
        timeout: 15_000,
      })
      .toBe('1');
    await expect.poll(() => otlp.spans.length, { timeout: 10_000 }).toBe(4);
    const listed = await jsonRequest(server.url, 'GET', '/plugins', undefined, { token });
    expect(listed.body.plugins).toHaveLength(1);
    expect(listed.body.plugins[0]).toMatchObject({ name: 'otel', failed: 0, dropped: 0 });
    expect(listed.body.plugins[0].stats).toMatchObject({ orphans: 0, spans_started: 4, spans_ended: 4 });
    expect(await server.stop('SIGTERM')).toBe(0);

    const turn = otlp.spans.find((span) => span.name === 'invoke_agent metis')!;
    const chats = otlp.spans.filter((span) => span.name.startsWith('chat '));
    const tool = otlp.spans.find((span) => span.name === 'execute_tool current_time')!;
    expect(chats).toHaveLength(2);
    expect(turn.parentSpanId).toBe('');
    for (const child of [...chats, tool]) {
      expect(child.traceId).toBe(turn.traceId);
      expect(child.parentSpanId).toBe(turn.spanId);
    }
    // Content is not on the bus: read from PostgreSQL through the asynchronous reads.
    expect(String(turn.attributes['gen_ai.input.messages'])).toContain('time');
    expect(turn.attributes['gen_ai.output.messages']).toBeDefined();
    for (const chat of chats) expect(String(chat.attributes['gen_ai.input.messages'])).toContain('time');
    expect(tool.attributes['gen_ai.tool.call.arguments']).toBeDefined();
    expect(tool.attributes['gen_ai.tool.call.result']).toBeDefined();
  }, 60_000);

  it('a cluster node on it reaches its broker first: one it cannot reach stops the start naming --nats (exit 2)', async () => {
    const url = freshDatabase(pg);
    const plain = home();
    const clustered = await runCli(
      ['serve', ...plain.args, '--store', url, '--nats', 'nats://127.0.0.1:1', '--node-id', 'a'],
      plain.home,
    );
    expect(clustered.exitCode).toBe(2);
    expect(clustered.stderr).toContain('--nats');
    expect(clustered.stderr).not.toMatch(/\n\s+at /);
  }, 30_000);
});
