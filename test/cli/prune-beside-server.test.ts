import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { purgeOldEvents } from '../../src/core/store/retention.js';
import { jsonRequest } from '../helpers/http.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { eventually, subscribeOn, waitForType } from '../helpers/protocol.js';
import { type CliResult, runCli, serveCli } from '../helpers/run-cli.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const request = jsonRequest;

/**
 * A prune batch holds the write lock: on a loaded machine a request (a new session, a submitted turn) may
 * meet it for longer than the server waits, and is answered 503 METIS_ERR_STORAGE_BUSY with Retry-After, as
 * documented. A client retries; any other answer is returned as it is.
 */
async function retryWhileBusy(send: () => ReturnType<typeof request>): ReturnType<typeof request> {
  let answer = await send();
  for (let retry = 0; answer.status === 503 && retry < 10; retry += 1) {
    expect(answer.body.error.code).toBe('METIS_ERR_STORAGE_BUSY');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    answer = await send();
  }
  return answer;
}

/**
 * Normal traffic until `done()`: a session, a WebSocket client attached to it (its subscription is
 * recorded in `system`), then turns one after another.
 */
async function traffic(url: string, workspace: string, done: () => boolean): Promise<number> {
  let turns = 0;
  while (!done()) {
    const created = await retryWhileBusy(() =>
      request(url, 'POST', '/sessions', { workspace_path: workspace }),
    );
    expect(created.status).toBe(201);
    const sessionId = created.body.session_id as string;
    const handshake = await request(url, 'GET', `/sessions/${sessionId}`);
    const client = await openClient(handshake.body.ws_url as string);
    await subscribeOn(client, { filter: 'preset:full', since: null, snapshot: true });
    for (let i = 0; i < 4 && !done(); i += 1) {
      const submitted = await retryWhileBusy(() =>
        request(url, 'POST', `/sessions/${sessionId}/turns`, { message: `hello ${i}` }),
      );
      expect(submitted.status).toBe(202);
      await waitForType(client, 'turn.completed', i + 1, 30_000);
      turns += 1;
    }
    client.close();
  }
  return turns;
}

function sweptCount(dbPath: string): number {
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return db.prepare("SELECT count(*) FROM events WHERE type = 'trace.swept'").pluck().get() as number;
  } finally {
    db.close();
  }
}

interface Row {
  session_id: string;
  seq: number;
  id: string;
  type: string;
  payload_json: string;
}

describe('metis trace prune beside a live metis serve (issue 12, observation 4)', () => {
  it('invents no gap, writes nothing into the server’s sessions, and hands trace.swept to the server', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const seed = openDatabase(dbPath, { create: true });
    insertOldEvents(seed, { sessionId: 'sess_old_a', ageDays: 200, count: 400 });
    insertOldEvents(seed, { sessionId: 'sess_old_b', ageDays: 120, count: 300 });
    seed.close();
    const server = await serveCli(home, ['--db', dbPath]);

    let pruning = true;
    const loops = [0, 1, 2].map(() => traffic(server.url, home, () => !pruning));
    const cli = [];
    let inProcess = 0;
    let human: CliResult = { exitCode: -1, stdout: '', stderr: '' };
    try {
      // Real CLI prunes beside the server, and back-to-back prunes in between (the same code, from the
      // test process: a second process either way).
      for (let round = 0; round < 3; round += 1) {
        const pruned = await runCli(['trace', 'prune', '--days', '1', '--db', dbPath, '--json'], home);
        expect(pruned.exitCode, pruned.stderr).toBe(0);
        cli.push(JSON.parse(pruned.stdout));
        // The running server records what it was handed while it runs, not only when it stops.
        const recordedSoFar = 1 + round + inProcess;
        expect(await eventually(() => sweptCount(dbPath) >= recordedSoFar, 15_000)).toBe(true);
        for (let i = 0; i < 15; i += 1) {
          await purgeOldEvents({ dbPath, days: 1 });
          inProcess += 1;
        }
      }
      human = await runCli(['trace', 'prune', '--days', '1', '--db', dbPath], home);
      expect(human.exitCode, human.stderr).toBe(0);
    } finally {
      pruning = false;
    }
    const turns = (await Promise.all(loops)).reduce((a, b) => a + b, 0);
    expect(turns).toBeGreaterThan(0);
    expect(await server.stop('SIGTERM')).toBe(0);

    const db = openDatabase(dbPath, { readonly: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      const rows = db
        .prepare('SELECT session_id, seq, id, type, payload_json FROM events ORDER BY session_id, seq, id')
        .all() as Row[];
      // No invented gap anywhere; every session the server wrote (all but the seeded old ones) has seq
      // 1..n: no hole, no duplicate.
      const bySession = new Map<string, number[]>();
      for (const r of rows) bySession.set(r.session_id, [...(bySession.get(r.session_id) ?? []), r.seq]);
      const broken = [...bySession]
        .filter(
          ([sessionId, seqs]) => !sessionId.startsWith('sess_old_') && seqs.some((seq, i) => seq !== i + 1),
        )
        .map(([sessionId, seqs]) => ({
          sessionId,
          duplicates: seqs.filter((seq, i) => seqs[i - 1] === seq),
        }));
      const gapEvents = rows.filter((r) => r.type === 'bus.gap_detected');
      expect({ gapEvents: gapEvents.length, broken }).toEqual({ gapEvents: 0, broken: [] });
      // The server recorded one trace.swept per prune, and its writer's registration and unregistration.
      const system = rows.filter((r) => r.session_id === 'system');
      expect(system.filter((r) => r.type === 'trace.swept')).toHaveLength(4 + inProcess);
      const writer = (type: string) =>
        system.filter(
          (r) => r.type === type && JSON.parse(r.payload_json).subscription_name === 'trace-store-writer',
        );
      expect(writer('bus.subscriber_registered')).toHaveLength(1);
      expect(writer('bus.subscriber_unregistered')).toHaveLength(1);
      expect(db.prepare('SELECT count(*) FROM owner_handoffs').pluck().get()).toBe(0);
    } finally {
      db.close();
    }
    // The prune says who records its sweep.
    expect(cli[0]).toMatchObject({ rows_deleted: 700, handed_to_server_pid: server.pid });
    expect(human.stdout).toContain(
      `trace.swept handed to the running server (pid ${server.pid}), which records it in the system session`,
    );
  }, 180_000);

  it('observation 7: after a serve start/stop and a prune, `system` holds matching writer registration pairs, seq 1..n', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const server = await serveCli(home, ['--db', dbPath]);
    expect((await request(server.url, 'POST', '/sessions', { workspace_path: home })).status).toBe(201);
    expect(await server.stop('SIGTERM')).toBe(0);
    const pruned = await runCli(['trace', 'prune', '--db', dbPath, '--json'], home);
    expect(pruned.exitCode, pruned.stderr).toBe(0);

    const db = openDatabase(dbPath, { readonly: true });
    try {
      const system = db
        .prepare("SELECT seq, type, payload_json FROM events WHERE session_id = 'system' ORDER BY seq, id")
        .all() as { seq: number; type: string; payload_json: string }[];
      expect(system.map((r) => r.seq)).toEqual(system.map((_, i) => i + 1));
      const writer = system
        .filter((r) => JSON.parse(r.payload_json).subscription_name === 'trace-store-writer')
        .map(
          (r) =>
            `${r.type}${r.type === 'bus.subscriber_unregistered' ? `:${JSON.parse(r.payload_json).reason}` : ''}`,
        );
      // The server's writer, then the prune's: each registered, then unregistered at shutdown.
      expect(writer).toEqual([
        'bus.subscriber_registered',
        'bus.subscriber_unregistered:shutdown',
        'bus.subscriber_registered',
        'bus.subscriber_unregistered:shutdown',
      ]);
      expect(system.filter((r) => r.type === 'trace.swept')).toHaveLength(1);
    } finally {
      db.close();
    }
    // No server ran: the prune recorded its sweep itself.
    expect(JSON.parse(pruned.stdout)).toMatchObject({ handed_to_server_pid: null });
  }, 120_000);
});
