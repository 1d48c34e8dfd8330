import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicFactory } from 'ulid';
import { describe, expect, it } from 'vitest';
import { isMetisError } from '../../src/core/errors.js';
import { microsToIso } from '../../src/core/events/clock.js';
import { openDatabase } from '../../src/core/store/database.js';
import { type PurgeProgress, parseRetentionDays, purgeOldEvents } from '../../src/core/store/retention.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { allRows, countByType, insertOldEvents } from '../helpers/old-events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

const CHILD = join(import.meta.dirname, '../fixtures/ingest-child.ts');

function fileHash(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** A database with old events (some audit-typed), one 89 days old, and recent ones; closed. */
async function seeded(): Promise<{ dbPath: string; oldAuditIds: string[]; oldIds: string[] }> {
  const context = tempTraceContext();
  const db = context.db;
  const oldAuditIds = [
    ...insertOldEvents(db, { sessionId: 'sess_old', ageDays: 200, type: 'tool.confirmation_resolved' }),
    ...insertOldEvents(db, {
      sessionId: 'system',
      ageDays: 150,
      type: 'trace.swept',
      sensitivity: 'pseudonymous',
    }),
  ];
  const oldIds = insertOldEvents(db, { sessionId: 'sess_old', ageDays: 120, count: 5 });
  oldIds.push(
    ...insertOldEvents(db, { sessionId: 'sess_old', ageDays: 100, type: 'turn.completed', count: 2 }),
  );
  insertOldEvents(db, { sessionId: 'sess_recent', ageDays: 89, count: 1 });
  context.bus.emit(sessionCreated('sess_new'));
  context.bus.emit(turnStarted('sess_new'));
  await context.close();
  return { dbPath: context.dbPath, oldAuditIds, oldIds };
}

function sweptPayloads(dbPath: string): Record<string, unknown>[] {
  const db = openDatabase(dbPath);
  try {
    return (
      db
        .prepare("SELECT payload_json FROM events WHERE type = 'trace.swept' ORDER BY id")
        .pluck()
        .all() as string[]
    )
      .map((p) => JSON.parse(p) as Record<string, unknown>)
      .filter((p) => p.note === undefined); // the seeded old one has a placeholder payload
  } finally {
    db.close();
  }
}

describe('trace prune (retention)', () => {
  it('deletes old events in batches, keeps audit types and records one trace.swept with the counts', async () => {
    const { dbPath, oldAuditIds, oldIds } = await seeded();
    const progress: PurgeProgress[] = [];
    const result = await purgeOldEvents({
      dbPath,
      days: 90,
      batchSize: 3,
      onProgress: (p) => progress.push(p),
    });

    expect(result).toMatchObject({ rows_deleted: 7, rows_audit_exempt: 2, dry_run: false, batches: 3 });
    expect(result.by_type).toEqual({ 'turn.started': 5, 'turn.completed': 2 });
    expect(progress.at(0)).toEqual({ deleted: 0, total: 7 });
    expect(progress.at(-1)).toEqual({ deleted: 7, total: 7 });

    const db = openDatabase(dbPath);
    const ids = new Set(allRows(db).map((r) => r[0]));
    expect(oldIds.filter((id) => ids.has(id))).toEqual([]);
    expect(oldAuditIds.every((id) => ids.has(id))).toBe(true);
    const oldestAudit = db
      .prepare('SELECT timestamp_us FROM events WHERE id = ?')
      .pluck()
      .get(oldAuditIds[0]);
    expect(result.oldest_kept_timestamp).toBe(microsToIso(oldestAudit as number));
    expect(db.prepare("SELECT count(*) FROM events WHERE session_id = 'sess_recent'").pluck().get()).toBe(1);
    expect(db.prepare("SELECT count(*) FROM events WHERE session_id = 'sess_new'").pluck().get()).toBe(2);
    db.close();

    const swept = sweptPayloads(dbPath);
    expect(swept).toEqual([
      {
        rows_deleted: 7,
        rows_audit_exempt: 2,
        cutoff_timestamp: result.cutoff_timestamp,
        oldest_kept_timestamp: result.oldest_kept_timestamp,
        dry_run: false,
        swept_at: result.swept_at,
      },
    ]);
  });

  it('deletes nothing the second time, and records one more trace.swept for that run', async () => {
    const { dbPath } = await seeded();
    await purgeOldEvents({ dbPath });
    const second = await purgeOldEvents({ dbPath });
    expect(second).toMatchObject({ rows_deleted: 0, batches: 0, rows_audit_exempt: 2, by_type: {} });
    const swept = sweptPayloads(dbPath);
    expect(swept.map((p) => p.rows_deleted)).toEqual([7, 0]);
  });

  it('archived streaming events older than retention go too; newer ones stay', async () => {
    const { dbPath } = await seeded();
    const db = openDatabase(dbPath);
    const insert = db.prepare(
      'INSERT INTO stream_events (session_id, id, timestamp_us, event_json) VALUES (?, ?, ?, ?)',
    );
    const archived = (sessionId: string, ageDays: number) => {
      const ms = Date.now() - ageDays * 86_400_000;
      const id = `evt_${monotonicFactory()(ms)}`;
      insert.run(sessionId, id, ms * 1000, JSON.stringify({ id, type: 'text.delta' }));
      return id;
    };
    archived('sess_old', 120);
    archived('sess_old', 100);
    const kept = [archived('sess_old', 80), archived('sess_new', 0)];
    db.close();

    await purgeOldEvents({ dbPath, days: 90 });
    const after = openDatabase(dbPath, { readonly: true });
    expect(after.prepare('SELECT id FROM stream_events ORDER BY id').pluck().all()).toEqual(kept);
    after.close();
  });

  it('--dry-run reports what would go and changes nothing', async () => {
    const { dbPath } = await seeded();
    const before = fileHash(dbPath);
    const db = openDatabase(dbPath, { readonly: true });
    const rowsBefore = allRows(db);
    db.close();

    const result = await purgeOldEvents({ dbPath, days: 90, dryRun: true });
    expect(result).toMatchObject({ rows_deleted: 7, rows_audit_exempt: 2, dry_run: true, batches: 0 });
    expect(result.by_type).toEqual({ 'turn.started': 5, 'turn.completed': 2 });

    expect(fileHash(dbPath)).toBe(before);
    const after = openDatabase(dbPath, { readonly: true });
    expect(allRows(after)).toEqual(rowsBefore);
    expect(countByType(after, 'trace.swept')).toBe(1); // only the seeded one
    after.close();
  });

  it('validates --days and refuses a missing database without creating it', async () => {
    for (const bad of ['0', '-3', '1.5', 'abc', '', '1e3']) {
      expect(() => parseRetentionDays(bad)).toThrowError(
        /--days must be a whole number of days from 1 to 1,000,000/,
      );
    }
    expect(parseRetentionDays('30')).toBe(30);
    expect(parseRetentionDays(undefined)).toBe(90);
    const missing = join(tempDir(), 'none.db');
    await expect(purgeOldEvents({ dbPath: missing, days: 0 })).rejects.toMatchObject({
      code: 'METIS_ERR_INVALID_ARGUMENT',
    });
    const error = await purgeOldEvents({ dbPath: missing }).catch((e: unknown) => e);
    expect(isMetisError(error) && error.code).toBe('METIS_ERR_DB_NOT_FOUND');
    expect(existsSync(missing)).toBe(false);
  });

  it('prunes while another process writes: every id the writer reported is still stored', async () => {
    const context = tempTraceContext();
    const oldIds = insertOldEvents(context.db, { sessionId: 'sess_old', ageDays: 365, count: 3000 });
    await context.close();
    const dbPath = context.dbPath;

    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dbPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const reported: string[] = [];
    let buffer = '';
    let stderr = '';
    let batches = 0;
    child.stderr.on('data', (chunk) => {
      stderr += String(chunk);
    });
    child.stdout.on('data', (chunk) => {
      buffer += String(chunk);
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      for (const line of lines) {
        if (line === 'ready' || line === '') continue;
        reported.push(...line.split(' '));
        batches += 1;
      }
    });
    const exited = new Promise<string | null>((resolve) =>
      child.on('exit', (_code, signal) => resolve(signal)),
    );
    const waitForBatches = async (n: number) => {
      while (batches < n) {
        if (child.exitCode !== null) throw new Error(`writer exited early: ${stderr}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };

    await waitForBatches(3);
    const result = await purgeOldEvents({ dbPath, batchSize: 100 });
    const atPruneEnd = batches;
    await waitForBatches(atPruneEnd + 3); // the writer kept going after the sweep too
    child.kill('SIGTERM');
    expect(await exited).toBe('SIGTERM');

    expect(result.rows_deleted).toBe(3000);
    expect(result.batches).toBe(30);
    const db = openDatabase(dbPath);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    const present = db.prepare('SELECT count(*) FROM events WHERE id = ?').pluck();
    expect(reported.length).toBeGreaterThan(0);
    expect(reported.filter((id) => present.get(id) !== 1)).toEqual([]);
    expect(oldIds.filter((id) => present.get(id) === 1)).toEqual([]);
    const holes = db
      .prepare(
        "SELECT session_id FROM events WHERE session_id LIKE 'sess\\_%' ESCAPE '\\' AND session_id != 'sess_old' " +
          'GROUP BY session_id HAVING max(seq) - min(seq) + 1 != count(*)',
      )
      .all();
    expect(holes).toEqual([]); // no batch of the writer was dropped
    expect(countByType(db, 'trace.swept')).toBe(1);
    db.close();
  }, 60_000);
});
