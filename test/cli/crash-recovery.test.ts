import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { isGone, procStat } from '../helpers/processes.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 12, observation 3: turns a crash cut stay open for ever, their tool calls stay running, a
 * `run:` child outlives the server, and `send --follow` hangs and then adopts the next turn. Each case
 * SIGKILLs a real `metis serve` child mid-turn and starts it again on the same database.
 */

const CONFIG = {
  runtime: {
    // Today's rule is the `fail` one; `resume` (the default) is test/durable/durable-turns.test.ts.
    on_restart: 'fail',
    tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
    // `slow:` streams for 400 × 25 ms = 10 s: long enough to be killed mid-message.
    scripted: { token_delay_ms: 1, slow_token_delay_ms: 25, slow_tokens: 400 },
  },
};

function project() {
  const home = tempDir();
  const dbPath = join(home, 'metis.db');
  const configPath = join(home, 'metis.config.json');
  writeFileSync(configPath, JSON.stringify(CONFIG));
  return { home, dbPath, args: ['--db', dbPath, '--config', configPath] };
}

async function post(url: string, path: string, body: unknown): Promise<Record<string, any>> {
  return (await jsonRequest(url, 'POST', path, body)).body;
}

/** A read-only view of the database; the query runs afresh on each call. */
function reader(dbPath: string) {
  const db = new Database(dbPath, { readonly: true });
  onTestFinished(() => {
    db.close();
  });
  return <T>(sql: string, ...params: unknown[]) => db.prepare(sql).all(...params) as T[];
}

/** Pids of running processes whose command line is exactly `argv`. */
function pidsRunning(argv: readonly string[]): number[] {
  const wanted = `${argv.join('\0')}\0`;
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        return readFileSync(`/proc/${entry}/cmdline`, 'utf8') === wanted;
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter((pid) => !isGone(pid));
}

/** Turns with a `turn.started` and no end. */
const OPEN_TURNS = `SELECT turn_id FROM events s WHERE type = 'turn.started' AND NOT EXISTS (
  SELECT 1 FROM events e WHERE e.turn_id = s.turn_id AND e.type IN ('turn.completed', 'turn.cancelled'))`;

const linuxOnly = process.platform !== 'linux';
if (linuxOnly) console.warn('skipped: these tests find processes through /proc (Linux only)');

describe.skipIf(linuxOnly)('a server killed mid-turn, started again (issue 12, observation 3)', () => {
  it('every open turn ends, every tool call is closed, the run: child is gone, seq stays whole', async () => {
    const { home, dbPath, args } = project();
    const first = await serveCli(home, args);
    const sleepSeconds = String(2000 + Math.floor(Math.random() * 900));
    const chat = (await post(first.url, '/sessions', { workspace_path: home })).session_id as string;
    const shell = (await post(first.url, '/sessions', { workspace_path: home })).session_id as string;
    const chatTurn = (await post(first.url, `/sessions/${chat}/turns`, { message: 'slow: tell me a story' }))
      .turn_id as string;
    const shellTurn = (
      await post(first.url, `/sessions/${shell}/turns`, { message: `run: sleep ${sleepSeconds}` })
    ).turn_id as string;
    const query = reader(dbPath);
    const stored = (turnId: string, type: string) =>
      query<{ id: string; parent_event_id: string; payload_json: string }>(
        'SELECT id, parent_event_id, payload_json FROM events WHERE turn_id = ? AND type = ?',
        turnId,
        type,
      );
    // Mid-message in one session, mid-tool in the other.
    expect(await eventually(() => stored(chatTurn, 'llm.call_started').length === 1, 20_000)).toBe(true);
    expect(await eventually(() => pidsRunning(['sleep', sleepSeconds]).length === 1, 20_000)).toBe(true);
    expect(await eventually(() => stored(shellTurn, 'tool.called').length === 1, 20_000)).toBe(true);
    const [sleepPid] = pidsRunning(['sleep', sleepSeconds]);
    // The server records the child's process group right after spawning it; on a busy machine the
    // child can be seen running a few ms before that record is on disk. A crash inside that window is
    // not recoverable (docs/decisions.md "Turns a crash cut"): kill only once the record is written.
    expect(await eventually(() => existsSync(`${dbPath}.children`), 10_000)).toBe(true);

    const recordBefore = existsSync(`${dbPath}.children`)
      ? readFileSync(`${dbPath}.children`, 'utf8')
      : 'none';
    await first.stop('SIGKILL');
    const recordAfterCrash = existsSync(`${dbPath}.children`)
      ? readFileSync(`${dbPath}.children`, 'utf8')
      : 'none';
    // The crash itself: the child outlives the server, and both turns are open.
    expect(isGone(sleepPid!)).toBe(false);
    expect(
      query<{ turn_id: string }>(OPEN_TURNS)
        .map((r) => r.turn_id)
        .sort(),
    ).toEqual([chatTurn, shellTurn].sort());

    const second = await serveCli(home, args);
    expect(JSON.parse(second.stdout().split('\n')[0]!)).toMatchObject({ recovered_turns: 2 });
    const killed = await eventually(() => isGone(sleepPid!), 10_000);
    expect(
      killed,
      `the run: child ${sleepPid} (${procStat(sleepPid!)?.join(' ')}) outlived the restart; ` +
        `the record before/after the crash: ${recordBefore} / ${recordAfterCrash}; the first server's stderr: ${first.stderr().slice(-2_000)}; the second server's stderr: ${second.stderr().slice(-2_000)}`,
    ).toBe(true);
    expect(query(OPEN_TURNS)).toEqual([]);
    for (const turnId of [chatTurn, shellTurn]) {
      const [started] = stored(turnId, 'turn.started');
      const ends = stored(turnId, 'turn.completed');
      expect(ends).toHaveLength(1);
      expect(ends[0]!.parent_event_id).toBe(started!.id);
      expect(JSON.parse(ends[0]!.payload_json)).toMatchObject({
        stop_reason: 'end_turn',
        signals_extra: { failure: 'server_stopped' },
      });
    }
    // The model call cut mid-message failed; the tool call cut mid-run failed.
    const [callStarted] = stored(chatTurn, 'llm.call_started');
    const callFailed = stored(chatTurn, 'llm.call_failed');
    expect(callFailed.map((e) => e.parent_event_id)).toEqual([callStarted!.id]);
    expect(JSON.parse(callFailed[0]!.payload_json)).toMatchObject({ error_class: 'other' });
    const [toolCalled] = stored(shellTurn, 'tool.called');
    const toolFailed = stored(shellTurn, 'tool.failed');
    expect(toolFailed.map((e) => e.parent_event_id)).toEqual([toolCalled!.id]);
    expect(query("SELECT id FROM tool_calls WHERE status IN ('pending', 'running')")).toEqual([]);
    expect(query<{ status: string }>('SELECT status FROM tool_calls').map((r) => r.status)).toEqual([
      'failed',
    ]);
    // Each session's seq runs 1..n with no hole and no duplicate, recovered events included.
    for (const sessionId of [chat, shell]) {
      const seqs = query<{ seq: number }>(
        'SELECT seq FROM events WHERE session_id = ? ORDER BY seq',
        sessionId,
      ).map((r) => r.seq);
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    }

    // The session takes its next turn.
    const next = (await post(second.url, `/sessions/${chat}/turns`, { message: 'hello again' }))
      .turn_id as string;
    expect(await eventually(() => stored(next, 'turn.completed').length === 1, 20_000)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('a delegation cut mid-worker: the worker turn, the delegation, the tool call and the planner turn end', async () => {
    const { home, dbPath, args } = project();
    const first = await serveCli(home, args);
    const planner = (await post(first.url, '/sessions', { workspace_path: home })).session_id as string;
    const turnId = (
      await post(first.url, `/sessions/${planner}/turns`, { message: 'delegate: slow: dig deep' })
    ).turn_id as string;
    const query = reader(dbPath);
    const workerCall = () =>
      query<{ session_id: string; turn_id: string }>(
        "SELECT session_id, turn_id FROM events WHERE type = 'llm.call_started' AND session_id != ?",
        planner,
      );
    expect(await eventually(() => workerCall().length === 1, 20_000)).toBe(true);
    await first.stop('SIGKILL');
    const [{ session_id: worker, turn_id: workerTurn }] = workerCall() as [
      { session_id: string; turn_id: string },
    ];

    const second = await serveCli(home, args);
    expect(query(OPEN_TURNS)).toEqual([]);
    const typesOf = (id: string) =>
      query<{ type: string }>('SELECT type FROM events WHERE turn_id = ? ORDER BY id', id).map((r) => r.type);
    expect(typesOf(workerTurn).slice(-2)).toEqual(['llm.call_failed', 'turn.completed']);
    expect(typesOf(turnId).slice(-3)).toEqual(['delegate.failed', 'tool.failed', 'turn.completed']);
    const [failed] = query<{ payload_json: string }>(
      "SELECT payload_json FROM events WHERE turn_id = ? AND type = 'delegate.failed'",
      turnId,
    );
    expect(JSON.parse(failed!.payload_json)).toMatchObject({
      worker_session_id: worker,
      failure_mode: 'worker_error',
    });
    expect(query('SELECT status, disposition FROM sessions WHERE id = ?', worker)).toEqual([
      { status: 'ended', disposition: 'error' },
    ]);
    expect(
      query("SELECT type FROM events WHERE session_id = ? AND type = 'session.ended'", worker),
    ).toHaveLength(1);
    // Only the recovery is under test here. Stopping this server right after its start was seen to
    // end it by SIGTERM without its handler running, 1 time in ~6 under heavy parallel load (reported).
    await second.stop('SIGTERM');
  }, 90_000);

  it('send --follow sees its own turn end after the restart and never adopts the next turn', async () => {
    const { home, args } = project();
    const first = await serveCli(home, args);
    const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).session_id as string;
    const follower = spawnCli(
      ['send', sessionId, 'slow: a long answer', '--follow', '--url', first.url],
      home,
    );
    await follower.waitForStdout((out) => out.includes('assistant:'), 30_000);

    await first.stop('SIGKILL');
    const second = await serveCli(home, args, first.port);
    // Another client's turn, at once: the follower is probably still reconnecting.
    await post(second.url, `/sessions/${sessionId}/turns`, { message: 'an unrelated marker' });

    const exitCode = await Promise.race([
      follower.exited(),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 30_000)),
    ]);
    expect(exitCode).toBe(1);
    expect(follower.stdout()).not.toContain('unrelated marker');
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
