import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AUDIT_EVENT_TYPES } from '../../src/core/events/catalog/index.js';
import { openDatabase } from '../../src/core/store/database.js';
import { purgePostgres } from '../../src/core/store/postgres/pg-prune.js';
import { purgeOldEvents, retentionCutoffUs } from '../../src/core/store/retention.js';
import { copyStore } from '../../src/core/store/store-copy.js';
import { insertOldEvents } from '../helpers/old-events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli } from '../helpers/run-cli.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 19 point 2: retention on PostgreSQL, the same sweep and record as on SQLite. */

const pg = postgresForFile();

const AUDIT_TYPE = [...AUDIT_EVENT_TYPES][0]!;

/** A SQLite store with events 100, 60 and 1 days old, some of an audit type. */
function agedStore(): string {
  const path = join(tempDir(), 'aged.db');
  const db = openDatabase(path, { create: true });
  try {
    insertOldEvents(db, { sessionId: 'sess_old', ageDays: 100, count: 1200 });
    insertOldEvents(db, { sessionId: 'sess_old', ageDays: 100, count: 3, type: AUDIT_TYPE });
    insertOldEvents(db, { sessionId: 'sess_mid', ageDays: 60, count: 40, type: 'turn.completed' });
    insertOldEvents(db, { sessionId: 'sess_new', ageDays: 1, count: 5 });
  } finally {
    db.close();
  }
  return path;
}

const withoutTimes = (result: Record<string, unknown>) => ({
  ...result,
  swept_at: null,
  cutoff_timestamp: null,
});

describe.skipIf(!postgresTestsRun)('metis trace prune --store', () => {
  it('deletes what the SQLite prune deletes, keeps the audit types, and records trace.swept', async () => {
    const sqlite = agedStore();
    const url = freshDatabase(pg);
    await copyStore({ from: sqlite, to: url });
    const home = tempDir();

    const dry = await runCli(['trace', 'prune', '--store', url, '--days', '30', '--dry-run', '--json'], home);
    expect(dry.exitCode, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ rows_deleted: 1240, rows_audit_exempt: 3, dry_run: true });
    expect(pg.psql('SELECT count(*) FROM events', new URL(url).pathname.slice(1)).trim()).toBe('1248');

    const onPostgres = await runCli(['trace', 'prune', '--store', url, '--days', '30', '--json'], home);
    const onSqlite = await runCli(['trace', 'prune', '--db', sqlite, '--days', '30', '--json'], home);
    expect(onPostgres.exitCode, onPostgres.stderr).toBe(0);
    expect(onSqlite.exitCode, onSqlite.stderr).toBe(0);
    const [fromPostgres, fromSqlite] = [JSON.parse(onPostgres.stdout), JSON.parse(onSqlite.stdout)];
    expect(fromPostgres.rows_deleted).toBe(1240);
    expect(fromPostgres.by_type).toEqual({ 'turn.started': 1200, 'turn.completed': 40 });
    expect(withoutTimes(fromPostgres)).toEqual({
      ...withoutTimes(fromSqlite),
      batches: fromPostgres.batches,
    });

    // The same events are left, and each side recorded one trace.swept.
    const exported = async (args: string[]) =>
      (await runCli(['export', ...args], home)).stdout
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line));
    const [left, right] = [await exported(['--store', url]), await exported(['--db', sqlite])];
    // (The SQLite prune also records its trace writer's registration in `system`: sessions' events only.)
    const kept = (events: { session_id: string; id: string }[]) =>
      events.filter((e) => e.session_id !== 'system').map((e) => e.id);
    expect(kept(left)).toEqual(kept(right));
    expect(kept(left)).toHaveLength(8);
    const swept = left.filter((e) => e.type === 'trace.swept');
    expect(swept).toHaveLength(1);
    expect(swept[0].payload.rows_deleted).toBe(1240);
    expect(swept[0].session_id).toBe('system');
  }, 60_000);

  it('in many small batches past kept audit rows, deletes exactly what the SQLite sweep deletes', async () => {
    // Audit rows between the old ones, so every batch after the first starts past kept rows.
    const path = join(tempDir(), 'interleaved.db');
    const db = openDatabase(path, { create: true });
    for (let round = 0; round < 6; round += 1) {
      insertOldEvents(db, { sessionId: `sess_${round}`, ageDays: 100 - round, count: 11 });
      insertOldEvents(db, { sessionId: `sess_${round}`, ageDays: 100 - round, count: 2, type: AUDIT_TYPE });
    }
    insertOldEvents(db, { sessionId: 'sess_new', ageDays: 1, count: 3 });
    db.close();
    const url = freshDatabase(pg);
    await copyStore({ from: path, to: url });
    const cutoffUs = retentionCutoffUs(30);
    const onPostgres = await purgePostgres({ url, cutoffUs, dryRun: false, batchSize: 7 });
    const onSqlite = await purgeOldEvents({
      dbPath: path,
      days: 30,
      batchSize: 7,
      nowUs: cutoffUs + 30 * 86_400_000_000,
    });
    expect(onPostgres.batches).toBeGreaterThan(5);
    expect(onPostgres.rows_deleted).toBe(66);
    expect(onPostgres.by_type).toEqual(onSqlite.by_type);
    expect(onPostgres.rows_audit_exempt).toBe(12);
    const left = pg
      .psql(
        "SELECT string_agg(id, ',' ORDER BY id) FROM events WHERE session_id <> 'system'",
        new URL(url).pathname.slice(1),
      )
      .trim();
    const sqlite = openDatabase(path, { readonly: true });
    const kept = (
      sqlite
        .prepare("SELECT id FROM events WHERE session_id <> 'system' ORDER BY id")
        .pluck()
        .all() as string[]
    ).join(',');
    sqlite.close();
    expect(left).toBe(kept);
  }, 60_000);

  it('prunes while a server uses the store: its working copy follows, it records trace.swept once, a restart reuses the copy (issue 35, operations online)', async () => {
    const url = freshDatabase(pg);
    await copyStore({ from: agedStore(), to: url });
    const dir = tempDir();
    let service = await serveOnStore(url, dir);
    const copyPath = service.dbPath;
    const inCopy = (sql: string) => {
      const db = openDatabase(copyPath, { readonly: true });
      try {
        return db.prepare(sql).pluck().get();
      } finally {
        db.close();
      }
    };
    const copyId = () => inCopy('SELECT copy_id FROM pg_working_copy');
    const before = copyId();
    expect(inCopy("SELECT count(*) FROM events WHERE session_id = 'sess_old'")).toBe(1203);

    const pruned = await runCli(['trace', 'prune', '--store', url, '--days', '30', '--json'], tempDir());
    expect(pruned.exitCode, pruned.stderr).toBe(0);
    const result = JSON.parse(pruned.stdout);
    expect(result.rows_deleted).toBe(1240);
    expect(result.recorded_by_server).toBe(`copy ${before}`);
    const count = (sql: string) => pg.psql(sql, new URL(url).pathname.slice(1)).trim();
    expect(count("SELECT count(*) FROM events WHERE session_id <> 'system'")).toBe('8');
    // The server's copy lost the same rows (audit ones kept), and no delete went back to the store.
    const deadline = Date.now() + 10_000;
    while (inCopy("SELECT count(*) FROM events WHERE session_id = 'sess_old'") !== 3 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(inCopy("SELECT count(*) FROM events WHERE session_id IN ('sess_old', 'sess_mid')")).toBe(3);
    expect(inCopy("SELECT count(*) FROM events WHERE session_id = 'sess_new'")).toBe(5);
    // The server recorded the sweep in its system session, numbered by it; the store gets it shipped.
    while (count("SELECT count(*) FROM events WHERE type = 'trace.swept'") !== '1' && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(count("SELECT count(*) FROM events WHERE type = 'trace.swept'")).toBe('1');
    const swept = JSON.parse(count("SELECT payload_json FROM events WHERE type = 'trace.swept'"));
    expect(swept.rows_deleted).toBe(1240);

    // The server goes on writing: a new session's events reach the store.
    const created = await fetch(`${service.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${service.auth.token}` },
      body: '{}',
    });
    expect(created.status).toBe(201);
    await service.stop();
    expect(Number(count("SELECT count(*) FROM events WHERE type = 'session.created'"))).toBeGreaterThan(0);
    // A restart reuses the copy (the prune did not make it stale) and finds no gap where rows went.
    service = await serveOnStore(url, dir);
    expect(copyId()).toBe(before);
    expect(service.gaps).toEqual([]);
    expect(count("SELECT count(*) FROM events WHERE type = 'trace.swept'")).toBe('1');
  }, 60_000);

  it('a server started after a prune rebuilds its working copy without what was pruned', async () => {
    const url = freshDatabase(pg);
    await copyStore({ from: agedStore(), to: url });
    const dir = tempDir();
    const start = () => serveOnStore(url, dir);
    let service = await start();
    const path = service.dbPath;
    await service.stop();
    const pruned = await runCli(['trace', 'prune', '--store', url, '--days', '30'], tempDir());
    expect(pruned.exitCode, pruned.stderr).toBe(0);
    service = await start();
    onTestFinished(() => service.stop());
    // The holes the prune left are not gaps: the rebuilt copy starts its gap scan at the store's end.
    expect(service.gaps).toEqual([]);
    const db = openDatabase(path, { readonly: true });
    try {
      expect(db.prepare("SELECT count(*) FROM events WHERE session_id = 'sess_old'").pluck().get()).toBe(3);
    } finally {
      db.close();
    }
  }, 60_000);
});
