import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

interface Listed {
  id: string;
  status: string;
  active_model: string | null;
  parent_session_id: string | null;
}

describe('metis conformance run --url against a server of the user (issue 29, point 6)', () => {
  it('ends the sessions it made, marked as its own; metis sessions leaves them out unless --all', async () => {
    const t = await startTestServer();
    const mine = await t.createSession();
    const home = tempDir();
    const run = await runCli(
      ['conformance', 'run', '--url', t.url, '--only', 'cancel_after_end', 'cancel_during_delegation'],
      home,
    );
    expect(run.exitCode, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain('PASS  cancel_during_delegation');

    const { body } = await t.request('GET', '/sessions');
    const sessions = (body as { sessions: Listed[] }).sessions;
    const made = sessions.filter((s) => s.id !== mine);
    const roots = made.filter((s) => s.parent_session_id === null);
    const workers = made.filter((s) => s.parent_session_id !== null);
    expect(roots.length).toBe(2);
    expect(workers.length).toBeGreaterThanOrEqual(1);
    // Marked by their model, and none left open.
    for (const s of roots) expect(s).toMatchObject({ active_model: 'scripted:conformance', status: 'ended' });
    for (const s of workers) expect(s.status).toBe('ended');

    const listed = await runCli(['sessions', '--url', t.url], home);
    expect(listed.exitCode).toBe(0);
    expect(listed.stdout).toContain(mine);
    for (const s of made) expect(listed.stdout).not.toContain(s.id);
    expect(listed.stdout).toContain(
      `(${made.length} sessions of metis conformance run not shown: --all shows them)`,
    );
    const json = await runCli(['sessions', '--url', t.url, '--json'], home);
    expect((JSON.parse(json.stdout) as Listed[]).map((s) => s.id)).toEqual([mine]);

    const all = await runCli(['sessions', '--url', t.url, '--all'], home);
    for (const s of made) expect(all.stdout).toContain(s.id);
    expect(all.stdout).not.toContain('not shown');
  }, 60_000);
});
