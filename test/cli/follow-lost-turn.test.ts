import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 12, observation 3 ("send --follow hung and then printed the next, unrelated turn as its own"),
 * in the case crash recovery cannot cover: the server comes back without the followed turn at all, so
 * no end of it will ever be sent. A real operator path gets there: `metis backup` while the server
 * runs, the server dies mid-turn, `metis restore` of that backup, `metis serve` again on the same port.
 * The follower (a real `metis send --follow` child) must give up with a clear error after its grace
 * (src/client/follow-turn.ts, ~10 s) and never show another turn of the session as its own.
 */

const CONFIG = {
  runtime: {
    // `slow:` streams for 400 × 25 ms = 10 s: long enough to be killed mid-message.
    scripted: { token_delay_ms: 1, slow_token_delay_ms: 25, slow_tokens: 400 },
  },
};

async function post(url: string, path: string, body: unknown): Promise<Record<string, any>> {
  return (await jsonRequest(url, 'POST', path, body)).body;
}

/** Runs `sql` on a fresh read-only connection (the database file is replaced during the test). */
function queryOnce<T>(dbPath: string, sql: string, ...params: unknown[]): T[] {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db.prepare(sql).all(...params) as T[];
  } finally {
    db.close();
  }
}

const count = (text: string, part: string) => text.split(part).length - 1;

describe('send --follow, back to a server that never had the turn (issue 12, observation 3)', () => {
  it('gives up with a clear error instead of waiting for ever, and never shows the next turn as its own', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const configPath = join(home, 'metis.config.json');
    writeFileSync(configPath, JSON.stringify(CONFIG));
    const args = ['--db', dbPath, '--config', configPath];
    const backupPath = join(home, 'before-the-turn.db');

    const first = await serveCli(home, args);
    const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).session_id as string;
    // The session is in the backup; the turn about to be followed is not.
    const backup = await runCli(['backup', backupPath, '--db', dbPath], home);
    expect(backup.exitCode, backup.stderr).toBe(0);

    const follower = spawnCli(
      ['send', sessionId, 'slow: a long answer', '--follow', '--url', first.url],
      home,
    );
    let followerEnded = false;
    void follower.exited().then(() => {
      followerEnded = true;
    });
    await follower.waitForStdout((out) => out.includes('assistant:'), 30_000);
    const [followed] = queryOnce<{ turn_id: string }>(
      dbPath,
      "SELECT turn_id FROM events WHERE session_id = ? AND type = 'turn.started'",
      sessionId,
    );
    expect(followed?.turn_id).toMatch(/^turn_/);

    await first.stop('SIGKILL');
    const restore = await runCli(['restore', backupPath, '--db', dbPath, '--force'], home);
    expect(restore.exitCode, restore.stderr).toBe(0);
    const second = await serveCli(home, args, first.port);
    // Nothing to recover: this server never heard of the followed turn, and will never end it.
    expect(JSON.parse(second.stdout().split('\n')[0]!)).toMatchObject({ recovered_turns: 0 });

    // The follower is back (its second "connected to" line), with the turn's end still owed to it.
    await follower.waitForStdout((out) => count(out, 'connected to') >= 2, 30_000);
    // Another client's turn in the same session, start to end, while the follower waits.
    const marker = (
      await post(second.url, `/sessions/${sessionId}/turns`, { message: 'an unrelated marker' })
    ).turn_id as string;
    const markerEnded = () =>
      queryOnce(dbPath, "SELECT 1 FROM events WHERE turn_id = ? AND type = 'turn.completed'", marker)
        .length === 1;
    expect(await eventually(markerEnded, 20_000)).toBe(true);
    // Else the check below proves nothing: the follower must have been attached for the whole other turn.
    // A scripted answer takes well under a second; the grace is ~10 s.
    expect(followerEnded).toBe(false);

    const exitCode = await Promise.race([
      follower.exited(),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 30_000)),
    ]);
    expect(exitCode, `stdout:\n${follower.stdout()}\nstderr:\n${follower.stderr()}`).toBe(1);
    expect(follower.stderr()).toContain(
      `turn ${followed!.turn_id} ended while the connection was down and its end was not received`,
    );
    expect(follower.stderr()).toContain(`metis tail ${sessionId}`);
    expect(follower.stderr()).not.toMatch(/\n\s+at /); // no stack trace
    expect(follower.stdout()).not.toContain('unrelated marker');
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
