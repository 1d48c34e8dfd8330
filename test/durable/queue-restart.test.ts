import { describe, expect, it } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { durableProject, notLinux, post, postgresStoreReader, storeReader } from './durable-helpers.js';

/*
 * Issue 31: messages queued while a turn runs outlive the process. A `slow:` turn runs; two messages
 * are enqueued and one steered; the server is stopped (SIGKILL on SQLite; SIGTERM on PostgreSQL, which
 * the server runs on alone, so the queue comes from the store). At the next start the cut turn
 * resumes and takes the steer, then the queued messages run as turns, in order, once each. On the main
 * before this the queue lived in memory: the two 202 "queued" messages never ran.
 */

const pg = postgresForFile();

async function queueOf(url: string, sessionId: string): Promise<any[]> {
  return (await jsonRequest(url, 'GET', `/sessions/${sessionId}/queue`)).body.queue ?? [];
}

async function queuedThenRestarted(store: 'sqlite' | 'postgres', signal: 'SIGKILL' | 'SIGTERM') {
  const { home, args: sqliteArgs, dbPath } = durableProject();
  const url = store === 'sqlite' ? null : freshDatabase(pg);
  const args = url === null ? sqliteArgs : [...sqliteArgs.slice(2), '--store', url];
  const first = await serveCli(home, args);
  const open = () => (url === null ? storeReader(dbPath) : postgresStoreReader(pg.psql, url));
  const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).body.session_id as string;
  const cut = (await post(first.url, `/sessions/${sessionId}/turns`, { message: 'slow: a long story' })).body
    .turn_id as string;
  const reader = open();
  expect(await eventually(() => reader.turn(cut).some((e) => e.type === 'llm.call_started'), 20_000)).toBe(
    true,
  );
  for (const [message, multitask] of [
    ['first queued', 'enqueue'],
    ['then steer this way', 'steer'],
    ['second queued', 'enqueue'],
  ] as const) {
    const sent = await post(first.url, `/sessions/${sessionId}/turns`, { message, multitask });
    expect(sent.status, JSON.stringify(sent.body)).toBe(202);
  }
  expect((await queueOf(first.url, sessionId)).map((q) => q.message)).toEqual([
    'then steer this way',
    'first queued',
    'second queued',
  ]);
  await first.stop(signal);

  const second = await serveCli(home, args);
  try {
    const after = open();
    const userTexts = () =>
      after
        .query<{ content_json: string }>(
          "SELECT content_json FROM messages WHERE session_id = ? AND role = 'user' ORDER BY created_at_us, id",
          sessionId,
        )
        .map((row) => JSON.parse(row.content_json)[0]?.text as string);
    const count = (type: string) =>
      after.query('SELECT 1 FROM events WHERE session_id = ? AND type = ?', sessionId, type).length;
    expect(
      await eventually(
        () => userTexts().length === 4 && count('turn.completed') === count('turn.started'),
        60_000,
      ),
    ).toBe(true);
    // The cut turn went on and took the steer (or, when a SIGTERM's drain let it end first, the steer
    // ran as the next turn); then each queued message ran once, in order.
    expect(userTexts()).toEqual([
      'slow: a long story',
      'then steer this way',
      'first queued',
      'second queued',
    ]);
    expect(count('turn.completed')).toBeGreaterThanOrEqual(3);
    expect(after.turn(cut).some((e) => e.type === 'turn.completed')).toBe(true);
    expect(await queueOf(second.url, sessionId)).toEqual([]);
    expect(after.query('SELECT queue_json FROM sessions WHERE id = ?', sessionId)).toEqual([
      { queue_json: null },
    ]);
    expect(after.seqWhole(sessionId)).toBe(true);
  } finally {
    await second.stop('SIGTERM');
  }
}

describe.skipIf(notLinux('queue-restart'))('queued messages across a restart (issue 31)', () => {
  it('on SQLite, after a SIGKILL: the cut turn takes the steer, then the queued turns run in order', async () => {
    await queuedThenRestarted('sqlite', 'SIGKILL');
  }, 120_000);

  it.skipIf(!postgresTestsRun)(
    'on PostgreSQL, after a SIGTERM, from the store itself',
    async () => {
      await queuedThenRestarted('postgres', 'SIGTERM');
    },
    120_000,
  );
});
