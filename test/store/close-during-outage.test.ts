import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { LOOP_BUSY_TIMEOUT_MS } from '../../src/core/store/database.js';
import { watchHandoffs } from '../../src/core/store/owner-handoffs.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { holdWriteLockInChild } from '../helpers/lock-holder.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Closing the trace store while another process holds its write lock: what waits is given a bounded
 * time (closeFlushTimeoutMs, and the handoff watcher's final drain), then the store closes anyway and
 * leaves the rest for the next start. A close that waited for the lock would hold a shutdown for as
 * long as the other process pleases.
 */
describe('closing the trace store during a storage outage', () => {
  it('settles within its bounds while the lock is still held, and leaves the handoff for the next start', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const context = openTraceContext({ dbPath, validation: 'strict', closeFlushTimeoutMs: 1000 });
    await context.flush();
    context.db.pragma(`busy_timeout = ${LOOP_BUSY_TIMEOUT_MS}`);
    const other = new Database(dbPath);
    other
      .prepare(
        "INSERT INTO owner_handoffs (session_id, type, payload_json, created_at_us) VALUES ('system', 'trace.swept', ?, 0)",
      )
      .run(
        JSON.stringify({
          rows_deleted: 0,
          rows_audit_exempt: 0,
          cutoff_timestamp: '2026-01-01T00:00:00.000000Z',
          oldest_kept_timestamp: null,
          dry_run: false,
          swept_at: '2026-01-01T00:00:00.000000Z',
        }),
      );
    other.close();
    const lock = await holdWriteLockInChild(dbPath, 30_000);
    // Watched only once the lock is held: a watcher already running could record the handoff while the
    // lock holder was still starting (seen in CI on a loaded machine), and then nothing would meet the lock.
    watchHandoffs(context, { intervalMs: 100 });
    await new Promise((resolve) => setTimeout(resolve, 500));

    const started = Date.now();
    await context.close();
    const tookMs = Date.now() - started;
    const stillLocked = await Promise.race([lock.released.then(() => false), Promise.resolve(true)]);
    expect(stillLocked).toBe(true);
    expect(tookMs).toBeLessThan(15_000);
    await lock.release();

    // Nothing was recorded, so the handoff is still there for the next owner.
    const check = new Database(dbPath, { readonly: true });
    expect(
      check.prepare("SELECT count(*) FROM owner_handoffs WHERE type = 'trace.swept'").pluck().get(),
    ).toBe(1);
    check.close();
  }, 60_000);
});
