import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { reportGaps } from '../../src/core/store/trace-context.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

const CHILD = join(import.meta.dirname, '../fixtures/ingest-child.ts');

/** Runs the ingest child until it has reported `minBatches` committed batches plus a random extra wait, then SIGKILLs it. */
function runAndKill(dbPath: string, minBatches: number): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dbPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const committed: string[] = [];
    let buffer = '';
    let batches = 0;
    let killScheduled = false;
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += String(chunk);
    });
    child.stdout.on('data', (chunk) => {
      buffer += String(chunk);
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      for (const line of lines) {
        if (line === 'ready' || line === '') continue;
        committed.push(...line.split(' '));
        batches += 1;
      }
      if (batches >= minBatches && !killScheduled) {
        killScheduled = true;
        setTimeout(() => child.kill('SIGKILL'), Math.floor(Math.random() * 30));
      }
    });
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`child exited without being killed: ${stderr}`));
      else resolve(committed); // a partial last line was never reported as committed: ignore it
    });
  });
}

describe('crash recovery', () => {
  it('keeps every reported commit, has no seq hole and passes integrity_check after repeated SIGKILL', async () => {
    const dbPath = join(tempDir(), 'crash.db');
    const reported = new Set<string>();
    for (let round = 0; round < 5; round += 1) {
      const committed = await runAndKill(dbPath, 5 + Math.floor(Math.random() * 20));
      for (const id of committed) reported.add(id);
      const db = openDatabase(dbPath);
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      const present = db.prepare('SELECT count(*) FROM events WHERE id = ?').pluck();
      const missing = [...reported].filter((id) => present.get(id) !== 1);
      expect(missing).toEqual([]);
      const sessions = db
        .prepare(
          "SELECT session_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM events WHERE session_id LIKE 'sess_%' GROUP BY session_id",
        )
        .all() as { session_id: string; n: number; lo: number; hi: number }[];
      expect(sessions.length).toBeGreaterThan(0);
      for (const s of sessions) expect({ ...s, n: s.hi - s.lo + 1 }).toEqual(s); // contiguous seq
      db.close();
    }
    expect(reported.size).toBeGreaterThan(100);
  }, 120_000);
});

describe('gap detection (§9.1 test 3)', () => {
  it('reports a hole left by a failed write once, with the ids around it, after a restart', async () => {
    const dir = tempDir();
    const dbPath = join(dir, 'gaps.db');
    const first = tempTraceContext({ dbPath });
    const { bus } = first;
    const emitTurn = () =>
      bus.emit({
        type: 'turn.cancelled',
        session_id: 's',
        payload: { reason: 'timeout', partial_llm_calls: 0, partial_tool_calls: 0 },
      })!;
    const before = emitTurn();
    await first.flush();
    // The writer "crashes" mid-write: this tick's batch never reaches the table.
    first.db.exec(
      "CREATE TRIGGER crash BEFORE INSERT ON events WHEN NEW.session_id = 's' BEGIN SELECT RAISE(ABORT, 'crash'); END",
    );
    const lost = [emitTurn(), emitTurn(), emitTurn()];
    await first.flush();
    first.db.exec('DROP TRIGGER crash');
    const after = emitTurn();
    await first.flush();
    expect(lost.every((e) => first.store.getEvent(e.id) === null)).toBe(true);
    await first.close();

    const second = tempTraceContext({ dbPath });
    const gaps = await reportGaps(second);
    expect(gaps).toHaveLength(1);
    expect(gaps[0]).toMatchObject({
      session_id: 's',
      gap_start_id: before.id,
      gap_end_id: after.id,
      estimated_missing_count: 3,
    });
    const events = second.store.sessionEvents('s').filter((e) => e.type === 'bus.gap_detected');
    expect(events).toHaveLength(1);
    expect(events[0]!.payload).toMatchObject({
      gap_start_id: before.id,
      gap_end_id: after.id,
      estimated_missing_count: 3,
    });
    await second.close();

    const third = tempTraceContext({ dbPath });
    expect(await reportGaps(third)).toHaveLength(0);
    expect(third.store.sessionEvents('s').filter((e) => e.type === 'bus.gap_detected')).toHaveLength(1);
  });
});
