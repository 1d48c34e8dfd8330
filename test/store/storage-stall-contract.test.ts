import { performance } from 'node:perf_hooks';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import { LOOP_BUSY_TIMEOUT_MS } from '../../src/core/store/database.js';
import { pgStorageStall } from '../../src/core/store/postgres/pg-storage-stall.js';
import { type StorageStall, sqliteStorageStall } from '../../src/core/store/storage-stall.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session } from '../helpers/row-change-builders.js';
import { tempTraceContext } from '../helpers/tmp.js';
import { recorded } from '../helpers/writer-rows.js';

/**
 * The conformance suite's storage stall (`POST /_conformance/stall-storage`) on both stores: SQLite's
 * file lock from a second connection, PostgreSQL's table locks from a connection of its own. While it
 * holds, a commit started during it (events, or a row alone) waits and reads go on; once it is let go,
 * by its time or by its release, everything that waited is committed: nothing is lost or doubled.
 */

const server = postgresForFile();

interface Subject {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  readonly stall: StorageStall;
  all(sql: string): Promise<Record<string, unknown>[]>;
  flush(): Promise<void>;
}

const STORES: readonly { name: string; runs: boolean; open(): Promise<Subject> }[] = [
  {
    name: 'SQLite (TraceWriter, file lock)',
    runs: true,
    open: async () => {
      // A server's loop waits this long for the lock, then the writer retries (database.ts serveTheLoop).
      const context = tempTraceContext({ busyTimeoutMs: LOOP_BUSY_TIMEOUT_MS });
      return {
        bus: context.bus,
        writer: context.writer,
        stall: sqliteStorageStall(context.dbPath),
        all: async (sql) => context.db.prepare(sql).all() as Record<string, unknown>[],
        flush: () => context.flush(),
      };
    },
  },
  {
    name: 'PostgreSQL (PgStoreWriter, table locks)',
    runs: postgresTestsRun,
    open: async () => {
      const pg = await openPgWriter(server);
      return {
        bus: pg.bus,
        writer: pg.writer,
        stall: pgStorageStall(pg.url),
        all: async (sql) => (await pg.pool.query(sql)).rows,
        flush: pg.flush,
      };
    },
  },
];

/** Holds the stall, released when the test ends whatever happened. */
async function held(stall: StorageStall, ms: number): Promise<() => Promise<void>> {
  const release = await stall.hold(ms);
  onTestFinished(release);
  return release;
}

const STALL_MS = 800;

for (const store of STORES) {
  describe.runIf(store.runs)(`storage stall: ${store.name}`, () => {
    it('holds a commit of events and rows started during it until it ends; nothing is lost', async () => {
      const { bus, writer, stall, all, flush } = await store.open();
      bus.emit(sessionCreated('sess_before'));
      await flush();

      await held(stall, STALL_MS);
      const heldAt = performance.now();
      const settled: string[] = [];
      const ids = [bus.emit(sessionCreated('sess_a'))!.id];
      writer.writeRow(recorded(session('sess_a', 1), settled));
      for (let i = 0; i < 50; i += 1) ids.push(bus.emit(turnStarted('sess_a'))!.id);
      // Reads go on meanwhile, and see nothing of the commit waiting.
      const during = await all("SELECT count(*) AS n FROM events WHERE session_id = 'sess_a'");
      expect(Number(during[0]!.n)).toBe(0);
      expect(performance.now() - heldAt).toBeLessThan(STALL_MS / 2);

      await writer.whenCommitted(ids.at(-1)!, 0);
      expect(performance.now() - heldAt).toBeGreaterThanOrEqual(STALL_MS - 50);
      await flush();
      const stored = await all("SELECT id FROM events WHERE session_id = 'sess_a' ORDER BY id");
      expect(stored.map((row) => row.id)).toEqual(ids);
      expect(settled).toEqual(['session.create:true']);
      expect(writer.stats.droppedEvents).toBe(0);
    });

    it('holds a commit of a row alone too, and lets it go at once when released early', async () => {
      const { bus, writer, stall, all, flush } = await store.open();
      bus.emit(sessionCreated('sess_a'));
      await flush();

      const release = await held(stall, 30_000);
      const settled: string[] = [];
      writer.writeRow(
        recorded({ kind: 'title.set', sessionId: 'sess_a', title: 'Held', atUs: 1 }, settled, 'title'),
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(settled).toEqual([]);
      expect(await all('SELECT title FROM session_titles')).toEqual([]);

      const releasedAt = performance.now();
      await release();
      await flush();
      // Well before the stall's 30 s: the writer's next retry (at most 1 s apart) finds the store free.
      expect(performance.now() - releasedAt).toBeLessThan(5_000);
      expect(settled).toEqual(['title:true']);
      expect(await all('SELECT title FROM session_titles')).toEqual([{ title: 'Held' }]);
      await release(); // a second release does nothing
    });
  });
}
