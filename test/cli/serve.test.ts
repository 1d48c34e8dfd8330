import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { subscribeOn, waitForType } from '../helpers/protocol.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { openClient } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const request = jsonRequest;

/** Rejects after `ms` with `what`, so a missing close or exit fails the test instead of hanging it. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('metis serve: the database lock', () => {
  it('a second `metis serve` on the same database refuses to start and names the first one’s pid', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const first = await serveCli(home, ['--db', dbPath]);
    // The lock file holds the first server's pid (the child itself: node runs the CLI in-process).
    expect(readFileSync(`${dbPath}.lock`, 'utf8').trim()).toBe(String(first.pid));

    const second = await runCli(['serve', '--port', '0', '--json', '--db', dbPath], home);
    expect(second.exitCode).not.toBe(0);
    expect(second.stdout).not.toContain('"url"');
    const named = /is in use by another metis process \(pid (\d+)\)/.exec(second.stderr);
    expect(named, second.stderr).not.toBeNull();
    expect(Number(named![1])).toBe(first.pid);

    // The refusal left the first server and its lock alone.
    expect((await request(first.url, 'GET', '/healthz')).status).toBe(200);
    expect(readFileSync(`${dbPath}.lock`, 'utf8').trim()).toBe(String(first.pid));
    expect(await first.stop('SIGTERM')).toBe(0);
    expect(existsSync(`${dbPath}.lock`)).toBe(false);
  }, 90_000);
});

describe('metis serve: graceful shutdown with a turn in flight', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)(
    '%s: exit 0, clients closed with 1001, the turn stored as cancelled, the lock released',
    async (signal) => {
      const home = tempDir();
      const dbPath = join(home, 'metis.db');
      // SIGTERM with `on_restart: resume` (the default) hands running turns over to the next start
      // instead (test/durable/durable-turns.test.ts); Ctrl-C cancels them either way.
      const configPath = join(home, 'metis.config.json');
      writeFileSync(configPath, JSON.stringify({ runtime: { on_restart: 'fail' } }));
      const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
      expect(existsSync(`${dbPath}.lock`)).toBe(true);

      const created = await request(server.url, 'POST', '/sessions', { workspace_path: home });
      expect(created.status).toBe(201);
      const sessionId = created.body.session_id as string;
      const handshake = await request(server.url, 'GET', `/sessions/${sessionId}`);
      expect(handshake.status).toBe(200);
      const client = await openClient(handshake.body.ws_url as string);
      await subscribeOn(client, { filter: 'preset:full', since: null, snapshot: true });

      const submitted = await request(server.url, 'POST', `/sessions/${sessionId}/turns`, {
        message: 'slow: the shutdown',
      });
      expect(submitted.status).toBe(202);
      const turnId = submitted.body.turn_id as string;
      await waitForType(client, 'text.delta', 1, 30_000);
      expect(client.events().some((e) => e.type === 'turn.completed')).toBe(false);

      const [exitCode, closed] = await Promise.all([
        within(server.stop(signal), 60_000, `metis serve to exit after ${signal}`),
        within(client.closed, 60_000, 'the WebSocket to close'),
      ]);
      expect(exitCode, server.stderr()).toBe(0);
      expect(closed).toEqual({ code: 1001, reason: 'server shutting down' });
      expect(existsSync(`${dbPath}.lock`)).toBe(false);
      // The attached client saw the cancellation close out the turn before the socket closed (§6.2.1).
      const seen = client.events().filter((e) => e.turn_id === turnId);
      expect(seen.map((e) => e.type).slice(-3)).toEqual([
        'message.complete',
        'llm.call_failed',
        'turn.cancelled',
      ]);
      expect(seen.at(-2).payload.error_class).toBe('cancelled');

      const db = new Database(dbPath, { readonly: true, fileMustExist: true });
      try {
        const events = db
          .prepare('SELECT type, payload_json FROM events WHERE turn_id = ? ORDER BY id')
          .all(turnId) as { type: string; payload_json: string }[];
        const types = events.map((e) => e.type);
        expect(types.filter((t) => t === 'turn.cancelled')).toHaveLength(1);
        expect(types).not.toContain('turn.completed');
        const failed = events
          .filter((e) => e.type === 'llm.call_failed')
          .map((e) => JSON.parse(e.payload_json));
        expect(failed).toHaveLength(1);
        expect(failed[0].error_class).toBe('cancelled');
        const assistant = db
          .prepare("SELECT status FROM messages WHERE turn_id = ? AND role = 'assistant'")
          .pluck()
          .all(turnId);
        expect(assistant).toEqual(['cancelled']);
        expect(db.prepare('PRAGMA integrity_check').pluck().all()).toEqual(['ok']);
      } finally {
        db.close();
      }

      // The lock is released: a new server on the same database starts and serves the old session.
      const again = await serveCli(home, ['--db', dbPath]);
      expect(readFileSync(`${dbPath}.lock`, 'utf8').trim()).toBe(String(again.pid));
      const resumed = await request(again.url, 'GET', `/sessions/${sessionId}`);
      expect(resumed.status).toBe(200);
      expect(resumed.body.session.current_turn_id).toBeNull();
      expect(await again.stop('SIGTERM')).toBe(0);
      expect(existsSync(`${dbPath}.lock`)).toBe(false);
    },
    120_000,
  );
});
