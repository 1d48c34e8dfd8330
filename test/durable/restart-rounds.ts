import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EventSource } from 'eventsource';
import { expect } from 'vitest';
import { STREAMING_TYPES } from '../../src/core/events/streaming.js';
import { seeded } from '../helpers/following-client.js';
import { serverToken } from '../helpers/home-token.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { post, type StoreReader } from './durable-helpers.js';

/** Turns with tools (side effects counted in a file of their own), thinking, delegation, slow answers. */
const SHAPES = [
  (file: string) => `slow-after: run: echo once >> ${file}`,
  (file: string) => `think: run: echo once >> ${file}`,
  (file: string) => `run-each: echo once >> ${file} ;; sleep 1`,
  () => 'slow-after: time',
  () => 'think: slow: a story',
  // A worker runs the command: cut, it is not resumed, and its planner is told it was interrupted.
  (file: string) => `delegate: run: echo once >> ${file}`,
];

/**
 * A client following a session over SSE, as a browser's `EventSource` does: it reconnects by itself
 * with Last-Event-ID when the server comes back on the same port. Keeps every event it was shown.
 */
async function follow(
  url: string,
  sessionId: string,
): Promise<{ shown: any[]; since: string; close: () => void }> {
  const token = encodeURIComponent(serverToken(url) ?? '');
  const source = new EventSource(`${url}/sessions/${sessionId}/events?filter=preset:full&token=${token}`);
  const shown: any[] = [];
  let snapshotAt: string | null = null;
  source.onmessage = (message) => shown.push(JSON.parse(message.data).event);
  source.addEventListener('snapshot', (message) => {
    snapshotAt ??= JSON.parse(message.data).snapshot_at_event_id as string;
  });
  expect(await eventually(() => snapshotAt !== null, 10_000), `no snapshot for ${sessionId}`).toBe(true);
  return { shown, since: snapshotAt!, close: () => source.close() };
}

/**
 * `rounds` times: a real `metis serve` (`args`) gets two turns, each followed by an SSE client, is
 * killed (SIGKILL or SIGTERM) at a seeded random moment and started again on the same port; every turn
 * must end. Then, for every turn: it completed (one restart each, the cap is not reached), no command
 * ran twice, its session's seq is whole, and its client was shown exactly the session's stored events,
 * in their order (nothing a crash took back, nothing lost, nothing twice).
 */
export async function killDuringTurns(options: {
  home: string;
  args: readonly string[];
  /** The store the server runs on, read once it started (its banner names a SQLite file's path). */
  openStore: (banner: Record<string, any>) => StoreReader;
  seed: number;
  rounds: number;
}): Promise<void> {
  const next = seeded(options.seed);
  const { home, args } = options;
  let store: StoreReader | null = null;
  const turns: { sessionId: string; turnId: string; file: string }[] = [];
  // What a client subscribed at `since` must be shown: the session's stored events after its snapshot.
  const storedIds = (sessionId: string, since: string) =>
    store!
      .query<{ id: string }>(
        'SELECT id FROM events WHERE session_id = ? AND id > ? ORDER BY id',
        sessionId,
        since,
      )
      .map((r) => r.id);
  for (let round = 0; round < options.rounds; round += 1) {
    const server = await serveCli(home, args);
    const clients: { sessionId: string; shown: any[]; since: string; close: () => void }[] = [];
    store ??= options.openStore(JSON.parse(server.stdout().split('\n')[0]!));
    for (let i = 0; i < 2; i += 1) {
      const file = join(home, `side-${round}-${i}.txt`);
      const message = SHAPES[Math.floor(next() * SHAPES.length)]!(file);
      const sessionId = (await post(server.url, '/sessions', { workspace_path: home })).body
        .session_id as string;
      clients.push({ sessionId, ...(await follow(server.url, sessionId)) });
      const turnId = (await post(server.url, `/sessions/${sessionId}/turns`, { message })).body
        .turn_id as string;
      turns.push({ sessionId, turnId, file });
    }
    const wait = Math.floor(next() * 2500);
    const signal = next() < 0.5 ? 'SIGKILL' : 'SIGTERM';
    await new Promise((resolve) => setTimeout(resolve, wait));
    const code = await server.stop(signal);
    if (signal === 'SIGTERM') expect(code, `round ${round}: ${server.stderr().slice(-1500)}`).toBe(0);
    const again = await serveCli(home, args, server.port);
    const allEnded = () => turns.every((t) => store!.ended(t.turnId));
    expect(await eventually(allEnded, 30_000), `round ${round} (${signal} after ${wait} ms)`).toBe(true);
    for (const client of clients) {
      const shownIds = () =>
        client.shown
          .filter((e) => e.session_id === client.sessionId && !STREAMING_TYPES.has(e.type))
          .map((e) => e.id as string);
      const same = () =>
        JSON.stringify(shownIds()) === JSON.stringify(storedIds(client.sessionId, client.since));
      await eventually(same, 15_000);
      expect(
        shownIds(),
        `round ${round} (${signal} after ${wait} ms): what ${client.sessionId}'s client was shown`,
      ).toEqual(storedIds(client.sessionId, client.since));
      client.close();
    }
    expect(await again.stop('SIGTERM')).toBe(0);
  }
  for (const { sessionId, turnId, file } of turns) {
    const events = store!.turn(turnId);
    const end = events.at(-1)!;
    expect(end.type, turnId).toBe('turn.completed');
    expect(end.payload.signals_extra ?? null, turnId).toBeNull();
    if (existsSync(file)) expect(readFileSync(file, 'utf8').trim().split('\n')).toEqual(['once']);
    expect(store!.seqWhole(sessionId), sessionId).toBe(true);
  }
}
