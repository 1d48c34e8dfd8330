import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import type { ServerOptions } from '../../src/core/app/metis-server.js';
import { subscribe, subscribeReply, sync, waitForEvents } from '../helpers/protocol.js';
import { openClient, startTestServer, type TestClient, type TestServer } from '../helpers/server.js';
import { serverOnFile } from '../helpers/server-on-file.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 14 obs. 3: a cursor seconds or minutes old resumes with every delta it missed (streaming
 * §3.6 keeps `cursor_expired` for cursors past retention), after a restart too; past the resume
 * window the server says so instead of replaying without the message content.
 */

async function runTurn(
  t: Pick<TestServer, 'submit'>,
  sessionId: string,
  watcher: TestClient,
  message: string,
) {
  const turnId = await t.submit(sessionId, message);
  await waitForEvents(watcher, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
}

/** A server on a given database file, reopened on the same file by calling it again. */
async function serverOn(dbPath: string, workspace: string, options: ServerOptions = {}) {
  const { context, server, stop } = await serverOnFile(dbPath, { server: options });
  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as any };
  };
  return {
    context,
    stop,
    createSession: async () =>
      (await request('POST', '/sessions', { workspace_path: workspace })).body.session_id as string,
    submit: async (sessionId: string, message: string) =>
      (await request('POST', `/sessions/${sessionId}/turns`, { message })).body.turn_id as string,
    attach: async (sessionId: string) =>
      openClient((await request('GET', `/sessions/${sessionId}`)).body.ws_url),
  };
}

/** The replayed events of a subscribe by cursor, once they have all arrived. */
async function replayFrom(client: TestClient, since: string) {
  const reply = await subscribeReply(client, { filter: 'preset:full', since, snapshot: false });
  expect(reply).toMatchObject({ type: 'subscribe_ack' });
  expect(await sync(client)).toBe(true);
  return client.events().slice(0, reply.replay_event_count);
}

describe('resume window for streaming events (issue 14 obs. 3)', () => {
  it('a cursor from before six model calls replays every delta it missed, equal to what was live', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const { client: watcher } = await subscribe(t, sessionId, { filter: 'preset:full' });
    const since = t.context.store.sessionEvents(sessionId)[0]!.id; // session.created
    for (let i = 0; i < 6; i += 1) await runTurn(t, sessionId, watcher, `hello ${i}`);
    expect(await sync(watcher)).toBe(true);
    const missed = watcher.events().filter((e) => e.id > since);
    expect(missed.filter((e) => e.type === 'text.delta').length).toBeGreaterThanOrEqual(6);

    const replayed = await replayFrom(await t.attach(sessionId), since);
    expect(replayed).toEqual(missed);
  });

  it('after a restart on the same database, a cursor from before it replays the deltas too', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const before = await serverOn(dbPath, workspace);
    const sessionId = await before.createSession();
    const watcher = await before.attach(sessionId);
    await subscribeReply(watcher, { filter: 'preset:full', snapshot: false });
    const since = before.context.store.sessionEvents(sessionId)[0]!.id; // session.created
    for (let i = 0; i < 3; i += 1) await runTurn(before, sessionId, watcher, `hello ${i}`);
    expect(await sync(watcher)).toBe(true);
    const missed = watcher.events().filter((e) => e.id > since);
    await before.stop();

    const after = await serverOn(dbPath, workspace);
    const replayed = await replayFrom(await after.attach(sessionId), since);
    // What the new process adds (its session.resumed) comes after everything from before the restart.
    expect(replayed.slice(0, missed.length)).toEqual(missed);
    expect(replayed.filter((e) => e.type === 'text.delta').length).toBe(
      missed.filter((e) => e.type === 'text.delta').length,
    );
  });

  it('past the window the cursor is refused as cursor_expired, naming the window; the table stays bounded', async () => {
    const window = { minAgeMs: 0, minEvents: 12, pruneEveryMs: 0 };
    const t = await startTestServer({}, { streamWindow: window });
    const sessionId = await t.createSession();
    const { client: watcher } = await subscribe(t, sessionId, { filter: 'preset:full' });
    const since = t.context.store.sessionEvents(sessionId)[0]!.id; // session.created
    for (let i = 0; i < 8; i += 1) await runTurn(t, sessionId, watcher, `hello ${i}`);
    await t.context.flush();

    const expired = await subscribeReply(await t.attach(sessionId), {
      filter: 'preset:chat',
      since,
      snapshot: false,
    });
    expect(expired).toMatchObject({ type: 'subscribe_error', code: 'cursor_expired' });
    expect(expired.message).toMatch(/resume window.*newest 12.*snapshot: true/);
    const rows = t.context.db
      .prepare('SELECT count(*) FROM stream_events WHERE session_id = ?')
      .pluck()
      .get(sessionId) as number;
    expect(rows).toBeGreaterThan(0);
    expect(rows).toBeLessThanOrEqual(window.minEvents);
    // The last turn is inside the window: its cursor replays as live.
    expect(await sync(watcher)).toBe(true);
    const lastStart = watcher
      .events()
      .filter((e) => e.type === 'turn.started')
      .at(-1);
    const replayed = await replayFrom(await t.attach(sessionId), lastStart.id);
    expect(replayed).toEqual(watcher.events().filter((e) => e.id > lastStart.id));
  });

  it('a database from before the archive: a cursor from then is cursor_expired, not a replay without deltas', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const before = await serverOn(dbPath, workspace);
    const sessionId = await before.createSession();
    const watcher = await before.attach(sessionId);
    await subscribeReply(watcher, { filter: 'preset:full', snapshot: false });
    const since = before.context.store.sessionEvents(sessionId)[0]!.id; // session.created
    await runTurn(before, sessionId, watcher, 'hello');
    await before.stop();
    // As a database of schema 4 would be: no archive, so the migration must mark what is missing.
    const raw = new Database(dbPath);
    raw.exec('DROP TABLE stream_events; DROP TABLE stream_horizon;');
    raw.pragma('user_version = 4');
    raw.close();

    const after = await serverOn(dbPath, workspace);
    const reply = await subscribeReply(await after.attach(sessionId), {
      filter: 'preset:full',
      since,
      snapshot: false,
    });
    expect(reply).toMatchObject({ type: 'subscribe_error', code: 'cursor_expired' });
  });
});
