import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { runtimeConfig } from '../../src/core/config/runtime-schema.js';
import { silentLogger } from '../../src/core/logger.js';
import { Budgets } from '../../src/core/runtime/budget.js';
import type { CallResult } from '../../src/core/runtime/model-call.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 31: a session's budget lives in its row (schema version 8). Two Budgets over the same SQLite
 * file, one after the other, stand for a server and its restart: the second starts from what the first
 * counted, for the session and for its delegation tree, and reports no threshold twice.
 */

const ROOT = 'sess_budget_root';
const WORKER = 'sess_budget_worker';
const lineage = { parentOf: (id: string) => (id === WORKER ? ROOT : null) };

/** A call billed `usd` (its usage says `tokens` input tokens). */
const billed = (usd: number, tokens: number): CallResult => ({
  kind: 'failed',
  usage: { input_tokens: tokens, output_tokens: 0, cached_input_tokens: 0, cache_creation_input_tokens: 0 },
  costUsd: usd,
  text: '',
});

function open(dbPath: string) {
  const context = openTraceContext({ dbPath, validation: 'strict' });
  const budgets = new Budgets(context.bus, runtimeConfig({}), lineage, silentLogger(), context.port.budgets);
  return { context, budgets };
}

function alertsIn(dbPath: string): { session_id: string; pct: number; cap: string }[] {
  const db = new Database(dbPath, { readonly: true });
  try {
    return (
      db
        .prepare("SELECT session_id, payload_json FROM events WHERE type = 'quota.alert' ORDER BY id")
        .all() as {
        session_id: string;
        payload_json: string;
      }[]
    ).map((row) => {
      const payload = JSON.parse(row.payload_json);
      return { session_id: row.session_id, pct: payload.threshold_pct, cap: payload.cap_usd };
    });
  } finally {
    db.close();
  }
}

describe('budgets kept in the store (issue 31)', () => {
  it('caps, spend and the tree sum outlive the process; a threshold passed before is not alerted again', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const first = open(dbPath);
    for (const [id, parent] of [
      [ROOT, null],
      [WORKER, ROOT],
    ] as const)
      first.context.port.sessions.createSession({
        id,
        parent_session_id: parent,
        workspace_path: '/tmp/ws',
        workspace_hash: 'hash',
        active_model: 'scripted:demo',
      });
    first.budgets.set(ROOT, { session: { usd: 10 }, tree: { usd: 20, tokens: 5_000 } });
    first.budgets.charge(ROOT, 'scripted:demo', billed(9, 900), []);
    first.budgets.charge(WORKER, 'scripted:demo', billed(8, 800), []);
    await first.context.close();
    expect(alertsIn(dbPath)).toEqual([
      { session_id: ROOT, pct: 80, cap: '10' },
      { session_id: ROOT, pct: 80, cap: '20' },
    ]);

    const second = open(dbPath);
    try {
      expect(second.budgets.view(WORKER)).toMatchObject({
        session: { caps: { usd: null, tokens: null }, spent_usd: 8, spent_tokens: 800 },
        tree: { root_session_id: ROOT, caps: { usd: 20, tokens: 5_000 }, spent_usd: 17, spent_tokens: 1_700 },
      });
      expect(second.budgets.view(ROOT).session).toEqual({
        caps: { usd: 10, tokens: null },
        spent_usd: 9,
        spent_tokens: 900,
      });
      second.budgets.charge(ROOT, 'scripted:demo', billed(1.5, 150), []);
      // At the session's cap now: its next model call waits.
      const stop = new AbortController();
      const held = second.budgets.beforeModelCall(ROOT, 'turn_held', stop.signal);
      expect(second.budgets.view(ROOT).paused).toMatchObject([
        { turn_id: 'turn_held', scope: 'session', measure: 'usd', cap: 10, spent: 10.5 },
      ]);
      stop.abort();
      await held;
    } finally {
      await second.context.close();
    }
    expect(alertsIn(dbPath).slice(2)).toEqual([{ session_id: ROOT, pct: 100, cap: '10' }]);
  });
});
