import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { durableProject, notLinux, post, storeReader } from './durable-helpers.js';

/*
 * Issue 31 part 1: a turn a crash (SIGKILL) or a stop (SIGTERM) cut goes on at the next start of a
 * real `metis serve` child on the same SQLite file (docs/runtime.md "Durable turns").
 */

const linuxOnly = notLinux('durable-turns');

async function startTurn(url: string, home: string, message: string) {
  const sessionId = (await post(url, '/sessions', { workspace_path: home })).body.session_id as string;
  const turnId = (await post(url, `/sessions/${sessionId}/turns`, { message })).body.turn_id as string;
  return { sessionId, turnId };
}

describe.skipIf(linuxOnly)('durable turns: a cut turn resumes at the next start', () => {
  it('a model call cut mid-stream ends llm.call_failed (network) and is issued again; the turn completes', async () => {
    const { home, dbPath, args } = durableProject();
    const first = await serveCli(home, args);
    const { sessionId, turnId } = await startTurn(first.url, home, 'slow: a story');
    const store = storeReader(dbPath);
    expect(
      await eventually(() => store.turn(turnId).some((e) => e.type === 'llm.call_started'), 20_000),
    ).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(JSON.parse(second.stdout().split('\n')[0]!)).toMatchObject({
      recovered_turns: 0,
      resumed_turns: 1,
    });
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    const events = store.turn(turnId);
    const [cut, again] = events.filter((e) => e.type === 'llm.call_started');
    const failed = events.find((e) => e.type === 'llm.call_failed')!;
    expect(failed).toMatchObject({ parent_event_id: cut!.id, payload: { error_class: 'network' } });
    expect(again!.parent_event_id).toBe(failed.id);
    const end = events.at(-1)!;
    expect(end.type).toBe('turn.completed');
    expect(end.payload.signals_extra ?? null).toBeNull();
    expect(end.payload.llm_call_count).toBe(2);
    expect(events.filter((e) => e.type === 'llm.call_completed')).toHaveLength(1);
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('a crash while the model answers a tool result: the answer is asked again, the command ran once', async () => {
    const { home, dbPath, args } = durableProject();
    const first = await serveCli(home, args);
    const out = join(home, 'ran.txt');
    const { sessionId, turnId } = await startTurn(first.url, home, `slow-after: run: echo ran >> ${out}`);
    const store = storeReader(dbPath);
    // Killed while the model answers the tool's result: the tool ended, the turn did not.
    expect(
      await eventually(
        () => store.turn(turnId).filter((e) => e.type === 'llm.call_started').length === 2,
        20_000,
      ),
    ).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['ran']);
    const events = store.turn(turnId);
    expect(events.filter((e) => e.type === 'tool.called')).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed', payload: { tool_call_count: 1 } });
    expect(events.at(-1)!.payload.signals_extra ?? null).toBeNull();
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('in a call with two tool uses, the one stored as ended is reused, the one running is interrupted', async () => {
    const { home, dbPath, args } = durableProject();
    const first = await serveCli(home, args);
    const out = join(home, 'once.txt');
    const { sessionId, turnId } = await startTurn(
      first.url,
      home,
      `run-each: echo once >> ${out} ;; sleep 2347`,
    );
    const store = storeReader(dbPath);
    expect(
      await eventually(
        () =>
          store.turn(turnId).some((e) => e.type === 'tool.completed') &&
          store.query("SELECT 1 FROM tool_calls WHERE status = 'running'").length === 1 &&
          existsSync(`${dbPath}.children`),
        20_000,
      ),
    ).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['once']);
    const events = store.turn(turnId);
    expect(events.filter((e) => e.type === 'tool.called')).toHaveLength(2);
    expect(events.filter((e) => e.type === 'tool.completed')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'tool.failed').map((e) => e.payload.error_message)).toEqual([
      expect.stringMatching(/^interrupted/),
    ]);
    // The model got both results in one tool message, and answered.
    const [tools] = store.query<{ content_json: string }>(
      "SELECT content_json FROM messages WHERE turn_id = ? AND role = 'tool'",
      turnId,
    );
    expect(JSON.parse(tools!.content_json)).toHaveLength(2);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed', payload: { tool_call_count: 2 } });
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('a shell command cut while it ran is not run again: the model is told it was interrupted', async () => {
    const { home, dbPath, args } = durableProject();
    const first = await serveCli(home, args);
    const marker = join(home, 'started.txt');
    const { sessionId, turnId } = await startTurn(first.url, home, `run: echo x >> ${marker}; sleep 2345`);
    const store = storeReader(dbPath);
    expect(
      await eventually(
        () =>
          existsSync(`${dbPath}.children`) &&
          store.query("SELECT 1 FROM tool_calls WHERE status = 'running'").length === 1,
        20_000,
      ),
    ).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    const events = store.turn(turnId);
    const called = events.find((e) => e.type === 'tool.called')!;
    const failed = events.find((e) => e.type === 'tool.failed')!;
    expect(failed.parent_event_id).toBe(called.id);
    expect(failed.payload).toMatchObject({ error_class: 'execution_error' });
    expect(failed.payload.error_message).toMatch(/^interrupted/);
    expect(readFileSync(marker, 'utf8').trim().split('\n')).toEqual(['x']);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed' });
    expect(events.at(-1)!.payload.signals_extra ?? null).toBeNull();
    expect(store.query("SELECT status FROM tool_calls WHERE status IN ('pending', 'running')")).toEqual([]);
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('a shell call whose approval was pending asks again after the restart, and runs once allowed', async () => {
    const { home, dbPath, args } = durableProject({ tool_confirmation: { execute: 'ask' } });
    const first = await serveCli(home, args);
    const out = join(home, 'approved.txt');
    const { sessionId, turnId } = await startTurn(first.url, home, `run: echo approved >> ${out}`);
    const store = storeReader(dbPath);
    const asked = () => store.turn(turnId).filter((e) => e.type === 'tool.confirmation_requested');
    expect(await eventually(() => asked().length === 1, 20_000)).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(await eventually(() => asked().length === 2, 20_000)).toBe(true);
    const [before, again] = asked();
    expect(again!.parent_event_id).toBe(before!.parent_event_id);
    const answer = await post(
      second.url,
      `/sessions/${sessionId}/confirmations/${again!.payload.confirmation_request_id}`,
      { decision: 'allow' },
    );
    expect(answer.status).toBe(200);
    expect(await eventually(() => store.ended(turnId), 20_000)).toBe(true);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['approved']);
    expect(store.turn(turnId).filter((e) => e.type === 'tool.called')).toHaveLength(1);
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('a delegation cut mid-worker: the worker ends failed, the planner is told it was interrupted and goes on', async () => {
    const { home, dbPath, args } = durableProject();
    const first = await serveCli(home, args);
    const { sessionId, turnId } = await startTurn(first.url, home, 'delegate: slow: dig deep');
    const store = storeReader(dbPath);
    const workerCall = () =>
      store.query<{ session_id: string }>(
        "SELECT session_id FROM events WHERE type = 'llm.call_started' AND session_id != ?",
        sessionId,
      );
    expect(await eventually(() => workerCall().length === 1, 20_000)).toBe(true);
    await first.stop('SIGKILL');
    const worker = workerCall()[0]!.session_id;

    const second = await serveCli(home, args);
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    const events = store.turn(turnId);
    expect(events.find((e) => e.type === 'delegate.failed')?.payload).toMatchObject({
      worker_session_id: worker,
      failure_mode: 'worker_error',
      error_message: expect.stringMatching(/^interrupted/),
    });
    expect(events.find((e) => e.type === 'tool.failed')?.payload.error_message).toMatch(/^interrupted/);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed' });
    expect(events.at(-1)!.payload.signals_extra ?? null).toBeNull();
    expect(store.query('SELECT status, disposition FROM sessions WHERE id = ?', worker)).toEqual([
      { status: 'ended', disposition: 'error' },
    ]);
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(store.seqWhole(worker)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
