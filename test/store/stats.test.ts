import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { microsToIso } from '../../src/core/events/clock.js';
import { openDatabase } from '../../src/core/store/database.js';
import { SCHEMA_VERSION } from '../../src/core/store/schema.js';
import { traceStats } from '../../src/core/store/stats.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { allRows, insertOldEvents } from '../helpers/old-events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

describe('trace stats', () => {
  it('counts events by type and by session, largest first, with sizes and the time range', async () => {
    const context = tempTraceContext();
    insertOldEvents(context.db, { sessionId: 'sess_a', ageDays: 10, count: 3 });
    context.bus.emit(sessionCreated('sess_b'));
    context.bus.emit(turnStarted('sess_b'));
    await context.flush();
    const rows = allRows(context.db);

    const stats = traceStats(context.dbPath); // while the writer's connection is open: a -wal exists
    expect(stats.db_path).toBe(context.dbPath);
    expect(stats.schema_version).toBe(SCHEMA_VERSION);
    expect(stats.file_bytes).toBe(statSync(context.dbPath).size);
    expect(stats.wal_bytes).toBeGreaterThan(0);
    expect(stats.event_count).toBe(rows.length);
    expect(stats.oldest_event_timestamp).toBe(microsToIso(rows[0]![1]));
    expect(stats.newest_event_timestamp).toBe(microsToIso(rows.at(-1)![1]));

    const byType = new Map<string, number>();
    const bySession = new Map<string, number>();
    for (const r of rows) {
      byType.set(r[5], (byType.get(r[5]) ?? 0) + 1);
      bySession.set(r[2], (bySession.get(r[2]) ?? 0) + 1);
    }
    const sorted = <K extends string>(m: Map<string, number>, key: K) =>
      [...m]
        .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
        .map(([name, count]) => ({ [key]: name, count }));
    expect(stats.by_type).toEqual(sorted(byType, 'type'));
    expect(stats.by_session).toEqual(sorted(bySession, 'session_id'));
    expect(stats.by_type[0]).toEqual({ type: 'turn.started', count: 4 });
    expect(stats.session_count).toBe(bySession.size);
  });

  it('reports an empty database with null timestamps', () => {
    const dbPath = join(tempDir(), 'empty.db');
    openDatabase(dbPath, { create: true }).close();
    expect(traceStats(dbPath)).toMatchObject({
      event_count: 0,
      session_count: 0,
      wal_bytes: 0,
      oldest_event_timestamp: null,
      newest_event_timestamp: null,
      by_type: [],
      by_session: [],
    });
  });

  it('refuses a missing file and a file that is not a database', () => {
    const dir = tempDir();
    expect(() => traceStats(join(dir, 'none.db'))).toThrowError(
      expect.objectContaining({ code: 'METIS_ERR_DB_NOT_FOUND' }),
    );
    writeFileSync(join(dir, 'junk.db'), Buffer.alloc(4096, 42));
    expect(() => traceStats(join(dir, 'junk.db'))).toThrowError(
      expect.objectContaining({ code: 'METIS_ERR_NOT_A_METIS_DB' }),
    );
  });
});
