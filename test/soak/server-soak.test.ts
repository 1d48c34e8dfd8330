import { copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { jsonRequest } from '../helpers/http.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 12's soak: one real `metis serve` left running while turns of every kind, CLI prunes and
 * backups, another process taking the database's write lock, and a provider that always fails all hit
 * it at once. It must end up, with an intact database, gap-free and duplicate-free `seq` in every
 * session, every started turn ended and every acknowledged turn stored.
 */
// Bounded in CI as locally (the suite must stay under its 20 minutes); METIS_SOAK_MS soaks longer.
const SOAK_MS = Number(process.env.METIS_SOAK_MS ?? 15_000);
const USERS = 3;
const LOCK_HOLDER = join(import.meta.dirname, '..', 'fixtures', 'hold-write-lock.ts');
const MESSAGES = [
  'hello there',
  'time',
  'think: time',
  'run: echo soak',
  'read: notes.txt',
  'fail: server_error',
  'fail: rate_limit',
  'slow: a long story',
  'failing provider',
];

/** An OpenAI-compatible provider that answers every request with a 500. */
async function failingProvider(): Promise<string> {
  const server = createServer((_request, response) => {
    response.writeHead(500, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ error: { message: 'upstream exploded', type: 'server_error' } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

interface SoakLog {
  acknowledgedTurns: string[];
  refusals: Map<string, number>;
  unexpected: string[];
  prunes: number;
  backups: number;
  locks: number;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('soak: a server left running under mixed load', () => {
  it(
    `stays up and keeps its data whole for ${SOAK_MS / 1000} s of turns, prunes, backups, locks and provider failures`,
    async () => {
      const home = tempDir('metis-soak-');
      const workspace = tempDir('metis-soak-ws-');
      writeFileSync(join(workspace, 'notes.txt'), 'soak notes\n');
      const dbPath = join(home, 'metis.db');
      const configPath = join(home, 'metis.config.json');
      writeFileSync(
        configPath,
        JSON.stringify({
          runtime: {
            providers: {
              flaky: { kind: 'openai-compatible', base_url: await failingProvider(), max_retries: 1 },
            },
            scripted: { token_delay_ms: 1, slow_token_delay_ms: 5, slow_tokens: 200 },
            tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
          },
        }),
      );
      const server = await serveCli(home, ['--db', dbPath, '--config', configPath]);
      // Old sessions, so that every prune has something to delete.
      {
        const seedDb = new Database(dbPath);
        for (let i = 0; i < 5; i += 1)
          insertOldEvents(seedDb, { sessionId: `sess_old_${i}`, ageDays: 200, count: 50 });
        seedDb.close();
      }
      const log: SoakLog = {
        acknowledgedTurns: [],
        refusals: new Map(),
        unexpected: [],
        prunes: 0,
        backups: 0,
        locks: 0,
      };
      const deadline = Date.now() + SOAK_MS;
      const api = async (method: string, path: string, body?: unknown) => {
        try {
          return await jsonRequest(server.url, method, path, body);
        } catch (error) {
          throw new Error(
            `${method} ${path}: ${(error as Error).message}; the server's stderr ends:\n${server.stderr().slice(-3_000)}`,
          );
        }
      };
      const refused = (status: number, body: any, what: string): void => {
        const code = body?.error?.code ?? 'none';
        // A store that is busy or full for the moment may refuse new work, by name; nothing else may fail.
        if (status === 503 || status === 507) log.refusals.set(code, (log.refusals.get(code) ?? 0) + 1);
        else log.unexpected.push(`${what}: ${status} ${JSON.stringify(body)}`);
      };

      const waitTurnOver = async (sessionId: string, turnId: string) => {
        const until = Date.now() + 60_000;
        while (Date.now() < until) {
          const state = await api('GET', `/sessions/${sessionId}`);
          if (state.status === 200 && state.body.session.current_turn_id !== turnId) return;
          await pause(50);
        }
        log.unexpected.push(`turn ${turnId} still running after 60 s`);
      };

      const user = async () => {
        while (Date.now() < deadline) {
          const created = await api('POST', '/sessions', { workspace_path: workspace });
          if (created.status !== 201) {
            refused(created.status, created.body, 'POST /sessions');
            await pause(200);
            continue;
          }
          const sessionId = created.body.session_id as string;
          for (let k = 0; k < 4 && Date.now() < deadline; k += 1) {
            const message = pick(MESSAGES);
            const body = message === 'failing provider' ? { message, model: 'flaky:model-x' } : { message };
            const submitted = await api('POST', `/sessions/${sessionId}/turns`, body);
            if (submitted.status !== 202) {
              refused(submitted.status, submitted.body, 'POST turns');
              await pause(200);
              continue;
            }
            const turnId = submitted.body.turn_id as string;
            log.acknowledgedTurns.push(turnId);
            if (message.startsWith('slow:') && Math.random() < 0.7) {
              await pause(50 + Math.random() * 300);
              const cancel = await api('POST', `/sessions/${sessionId}/turns/${turnId}/cancel`, {});
              if (cancel.status !== 202 && cancel.status !== 404)
                refused(cancel.status, cancel.body, 'cancel');
            }
            await waitTurnOver(sessionId, turnId);
          }
        }
      };

      const operator = async () => {
        let round = 0;
        while (Date.now() < deadline) {
          round += 1;
          const prune = await runCli(['trace', 'prune', '--days', '30', '--db', dbPath, '--json'], home);
          if (prune.exitCode === 0) log.prunes += 1;
          else log.unexpected.push(`prune exit ${prune.exitCode}: ${prune.stderr}`);
          const backupPath = join(home, `backup-${round}.db`);
          const backup = await runCli(['backup', backupPath, '--db', dbPath, '--json'], home);
          if (backup.exitCode === 0) log.backups += 1;
          else log.unexpected.push(`backup exit ${backup.exitCode}: ${backup.stderr}`);
          await pause(1_000);
        }
      };

      const locker = async () => {
        await pause(2_000);
        while (Date.now() < deadline - 3_000) {
          // Held longer than the old 5 s busy timeout on some rounds, so waiting it out is not enough.
          const holdMs = pick([1_500, 3_000, 6_500]);
          const holder = await execa(
            process.execPath,
            ['--import', 'tsx', LOCK_HOLDER, dbPath, String(holdMs)],
            {
              reject: false,
            },
          );
          if (holder.exitCode === 0) log.locks += 1;
          else log.unexpected.push(`lock holder exit ${holder.exitCode}: ${holder.stderr}`);
          await pause(2_000 + Math.random() * 2_000);
        }
      };

      await Promise.all([...Array.from({ length: USERS }, user), operator(), locker()]);

      // Still up and answering.
      const health = await api('GET', '/healthz');
      expect(health.status).toBe(200);
      expect(log.unexpected).toEqual([]);
      expect(log.acknowledgedTurns.length).toBeGreaterThan(10);
      expect(log.prunes).toBeGreaterThan(0);
      expect(log.backups).toBeGreaterThan(0);
      expect(log.locks).toBeGreaterThan(0);

      expect(await server.stop('SIGTERM')).toBe(0);
      expect(existsSync(`${dbPath}.lock`)).toBe(false);

      const copy = join(home, 'final.db');
      copyFileSync(dbPath, copy);
      if (existsSync(`${dbPath}-wal`)) copyFileSync(`${dbPath}-wal`, `${copy}-wal`);
      const db = new Database(copy);
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');

      // seq: within each session, no duplicate and no hole (old seeded sessions lose their head to prunes).
      const seqs = db.prepare('SELECT session_id, seq FROM events ORDER BY session_id, seq').all() as {
        session_id: string;
        seq: number;
      }[];
      const bySession = new Map<string, number[]>();
      for (const row of seqs)
        bySession.set(row.session_id, [...(bySession.get(row.session_id) ?? []), row.seq]);
      const broken: string[] = [];
      for (const [sessionId, list] of bySession) {
        for (let i = 1; i < list.length; i += 1) {
          if (list[i] !== list[i - 1]! + 1) broken.push(`${sessionId}: seq ${list[i - 1]} then ${list[i]}`);
        }
      }
      expect(broken).toEqual([]);
      const gaps = db
        .prepare("SELECT session_id, payload_json FROM events WHERE type = 'bus.gap_detected'")
        .all();
      expect(gaps).toEqual([]);

      // Every acknowledged turn is stored, and every started turn ended.
      const started = new Set(
        db.prepare("SELECT turn_id FROM events WHERE type = 'turn.started'").pluck().all() as string[],
      );
      expect(log.acknowledgedTurns.filter((id) => !started.has(id))).toEqual([]);
      const ended = new Set(
        db
          .prepare("SELECT turn_id FROM events WHERE type IN ('turn.completed', 'turn.cancelled')")
          .pluck()
          .all() as string[],
      );
      expect([...started].filter((id) => !ended.has(id))).toEqual([]);
      const openCalls = db
        .prepare("SELECT count(*) FROM tool_calls WHERE status IN ('pending', 'running')")
        .pluck()
        .get();
      expect(openCalls).toBe(0);
      db.close();
      console.log(
        `soak: ${log.acknowledgedTurns.length} turns, ${log.prunes} prunes, ${log.backups} backups, ` +
          `${log.locks} external locks, refusals ${JSON.stringify(Object.fromEntries(log.refusals))}`,
      );
    },
    SOAK_MS + 120_000,
  );
});
