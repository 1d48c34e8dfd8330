import { describe, expect, it } from 'vitest';
import { runCli, spawnCli } from '../helpers/run-cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 29 obs. B and C, through the real CLI: a count of one reads in the singular ("1 turn", not
 * "1 turns"), and `metis sessions` shows each session's turns, cost and last activity, which
 * GET /sessions already answers.
 */

/** A server with one session that has run `turns` turns to their end. */
async function sessionWithTurns(turns: number): Promise<{ t: TestServer; sessionId: string }> {
  const t = await startTestServer();
  const sessionId = await t.createSession();
  for (let i = 0; i < turns; i += 1) {
    await t.submit(sessionId, `hello ${i}`);
    await t.runtime.currentTurn(sessionId)?.done;
  }
  await t.context.flush();
  return { t, sessionId };
}

/** `metis tail`'s first line about the session: "session <id>: N messages, N turns, $…". */
async function tailSnapshotLine(t: TestServer, sessionId: string): Promise<string> {
  const tail = spawnCli(['tail', sessionId, '--url', t.url], tempDir());
  await tail.waitForStdout((out) => /^session .*\n/m.test(out));
  await tail.stop('SIGINT');
  return tail
    .stdout()
    .split('\n')
    .find((line) => line.startsWith('session '))!;
}

describe('counts of one in the singular (issue 29 obs. B)', () => {
  it('metis tail says "2 messages, 1 turn" after one turn, and "4 messages, 2 turns" after two', async () => {
    const one = await sessionWithTurns(1);
    expect(await tailSnapshotLine(one.t, one.sessionId)).toMatch(
      new RegExp(`^session ${one.sessionId}: 2 messages, 1 turn, \\$`),
    );
    const two = await sessionWithTurns(2);
    expect(await tailSnapshotLine(two.t, two.sessionId)).toMatch(
      new RegExp(`^session ${two.sessionId}: 4 messages, 2 turns, \\$`),
    );
  }, 60_000);
});

describe('metis sessions shows turns, cost and last activity (issue 29 obs. C)', () => {
  it('has a column for each, with what GET /sessions answers, and --json keeps the fields', async () => {
    const { t, sessionId } = await sessionWithTurns(2);
    const idle = await t.createSession();
    const { body } = await t.request('GET', '/sessions');
    const byId = new Map<string, any>(body.sessions.map((s: any) => [s.id, s]));
    const busy = byId.get(sessionId);

    const human = await runCli(['sessions', '--url', t.url], tempDir());
    expect(human).toMatchObject({ exitCode: 0, stderr: '' });
    const [header, ...lines] = human.stdout.split('\n');
    expect(header).toMatch(/^session +status +model +turns +cost +last activity +created +workspace$/);
    const cells = (id: string) =>
      lines
        .find((line) => line.startsWith(id))!
        .split(/ {2,}/)
        .slice(3, 6);
    expect(cells(sessionId)).toEqual(['2', `$${busy.cost_usd.toFixed(6)}`, busy.last_activity_at]);
    expect(busy.last_activity_at).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
    expect(cells(idle)).toEqual(['0', '$0.000000', byId.get(idle).last_activity_at]);

    const json = await runCli(['sessions', '--json', '--url', t.url], tempDir());
    const records = JSON.parse(json.stdout) as any[];
    expect(records.find((r) => r.id === sessionId)).toMatchObject({
      turn_count: 2,
      cost_usd: busy.cost_usd,
      last_activity_at: busy.last_activity_at,
    });
  }, 60_000);
});
