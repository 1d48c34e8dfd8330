import { performance } from 'node:perf_hooks';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type SessionListParts, sessionListRoutes } from '../../src/core/api/session-list-route.js';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import type { ErrorCode } from '../../src/core/errors.js';
import type { JsonRoute } from '../../src/core/http/routes.js';
import { LOOP_BUSY_TIMEOUT_MS } from '../../src/core/store/database.js';
import { pgStorageStall } from '../../src/core/store/postgres/pg-storage-stall.js';
import { pgStoreReads } from '../../src/core/store/postgres/pg-store-reads.js';
import { sqliteWholeStoreReads } from '../../src/core/store/sqlite-whole-store-reads.js';
import { type StorageStall, sqliteStorageStall } from '../../src/core/store/storage-stall.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { sessionCreated } from '../helpers/events.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session } from '../helpers/row-change-builders.js';
import { startRuntime } from '../helpers/runtime.js';
import { tempTraceContext } from '../helpers/tmp.js';

/**
 * `PATCH /sessions/{session_id}` on either store, with no SQLite handle of its own: the session is
 * looked up through the lister (`WholeStoreReads.sessions.row`), the title is a `title.set` row change
 * through the store's writer, and the 200 comes once it is committed, with the row as the list shows
 * it. While storage is stalled the route answers the store's 503 once its wait is over; the title,
 * never dropped, is stored when storage comes back.
 */

const server = postgresForFile();

interface Subject {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  readonly list: SessionListParts['list'];
  readonly stall: StorageStall;
  /** What the store answers a request with when a commit did not come in time. */
  readonly refusal: ErrorCode;
  all(sql: string): Promise<Record<string, unknown>[]>;
  flush(): Promise<void>;
}

const STORES: readonly { name: string; runs: boolean; open(): Promise<Subject> }[] = [
  {
    name: 'SQLite',
    runs: true,
    open: async () => {
      const context = tempTraceContext({ busyTimeoutMs: LOOP_BUSY_TIMEOUT_MS });
      return {
        bus: context.bus,
        writer: context.writer,
        list: sqliteWholeStoreReads(context).sessions,
        stall: sqliteStorageStall(context.dbPath),
        refusal: 'METIS_ERR_STORAGE_BUSY',
        all: async (sql) => context.db.prepare(sql).all() as Record<string, unknown>[],
        flush: () => context.flush(),
      };
    },
  },
  {
    name: 'PostgreSQL',
    runs: postgresTestsRun,
    open: async () => {
      const pg = await openPgWriter(server);
      const reads = pgStoreReads(pg.url);
      onTestFinished(() => reads.close());
      return {
        bus: pg.bus,
        writer: pg.writer,
        list: reads.sessions,
        stall: pgStorageStall(pg.url),
        refusal: 'METIS_ERR_STORE_UNAVAILABLE',
        all: async (sql) => (await pg.pool.query(sql)).rows,
        flush: pg.flush,
      };
    },
  },
];

/** The PATCH route over `subject`, called as the HTTP framework calls it once the body is valid. */
async function patchRouteOf(subject: Subject, commitWaitMs = 5_000) {
  const routes = sessionListRoutes({
    // A runtime of its own: no session of the store runs in it, so current_turn_id is null.
    runtime: startRuntime().runtime,
    list: subject.list,
    store: { writer: subject.writer, upstream: null },
    commitWaitMs,
  });
  const route = routes.find((candidate) => candidate.method === 'PATCH') as JsonRoute;
  return async (sessionId: string, title: string | null) => {
    const [status, body] = await route.handle({
      request: undefined as never,
      params: [sessionId],
      body: { title },
      query: undefined,
      url: new URL(`http://metis.test/sessions/${sessionId}`),
    });
    return { status, body: body as Record<string, unknown> };
  };
}

async function withSession(subject: Subject, sessionId: string): Promise<void> {
  subject.bus.emit(sessionCreated(sessionId));
  subject.writer.writeRow({ what: 'session', change: session(sessionId, 1) });
  await subject.flush();
}

const STALL_MS = 600;

for (const store of STORES) {
  describe.runIf(store.runs)(`PATCH /sessions/{id} (title) on ${store.name}`, () => {
    it('sets and clears the title: a 200 once stored, answered as the list shows it', async () => {
      const subject = await store.open();
      await withSession(subject, 'sess_a');
      const patch = await patchRouteOf(subject);

      // A commit held a while by a stall: the 200 waits for it.
      const release = await subject.stall.hold(STALL_MS);
      onTestFinished(release);
      const asked = performance.now();
      const set = await patch('sess_a', 'Quarterly ocelot census');
      expect(performance.now() - asked).toBeGreaterThanOrEqual(STALL_MS - 50);
      // Stored when answered: read straight away, nothing flushed in between.
      expect(await subject.all('SELECT session_id, title FROM session_titles')).toEqual([
        { session_id: 'sess_a', title: 'Quarterly ocelot census' },
      ]);
      expect(set.status).toBe(200);
      expect(set.body).toMatchObject({
        id: 'sess_a',
        workspace_path: '/ws/sess_a',
        title: 'Quarterly ocelot census',
        title_source: 'user',
        current_turn_id: null,
      });
      expect(set.body).toEqual({ ...(await subject.list.row('sess_a')), current_turn_id: null });
      const found = await subject.list.search({ q: 'ocelot', includeConformance: false, limit: 10 });
      expect(found.rows.map((row) => row.title)).toEqual(['Quarterly ocelot census']);

      const cleared = await patch('sess_a', null);
      expect(cleared.status).toBe(200);
      expect(cleared.body).toMatchObject({ id: 'sess_a', title: null, title_source: null });
      expect(await subject.all('SELECT title FROM session_titles')).toEqual([]);
    });

    it('answers 404 for an unknown session and for the system session, and writes nothing', async () => {
      const subject = await store.open();
      // The writer gives `system` a bare sessions row with its first event: the route still knows it is none.
      subject.bus.emit(sessionCreated('system'));
      await withSession(subject, 'sess_a');
      const patch = await patchRouteOf(subject);
      for (const id of ['sess_nope', 'system'])
        await expect(patch(id, 'A title')).rejects.toMatchObject({ code: 'METIS_ERR_SESSION_NOT_FOUND' });
      await subject.flush();
      expect(await subject.all('SELECT title FROM session_titles')).toEqual([]);
    });

    it("answers the store's refusal while storage is stalled, and stores the title once it is back", async () => {
      const subject = await store.open();
      await withSession(subject, 'sess_a');
      const patch = await patchRouteOf(subject, 300);
      const release = await subject.stall.hold(20_000);
      onTestFinished(release);

      const asked = performance.now();
      await expect(patch('sess_a', 'Written late')).rejects.toMatchObject({ code: subject.refusal });
      const waited = performance.now() - asked;
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(5_000);

      await release();
      await subject.flush();
      // A row is never dropped: the refused request's title is stored once storage is back.
      expect(await subject.all('SELECT title FROM session_titles')).toEqual([{ title: 'Written late' }]);
      expect((await patch('sess_a', 'On time')).body).toMatchObject({ title: 'On time' });
    });
  });
}
