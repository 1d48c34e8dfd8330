import type { Logger } from 'pino';
import { describe, expect, it } from 'vitest';
import type { EventBus } from '../../src/core/bus/event-bus.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { StoreWriter } from '../../src/core/store/store-writer.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { openPgWriter } from '../helpers/pg-store-writer.js';
import { postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { session, toolCall, toolCallUpdate } from '../helpers/row-change-builders.js';
import { tempTraceContext } from '../helpers/tmp.js';
import { message, recorded } from '../helpers/writer-rows.js';

/**
 * The StoreWriter contract, held by both writers: SQLite's TraceWriter and PostgreSQL's PgStoreWriter
 * (docs/plans/store-port.md step 7). What the floors above the store observe must not depend on the
 * store: events and rows stored in queue order, acknowledgements after commit, listeners in order,
 * a refused row left out alone. PostgreSQL's own cases (outage, lost answer, fence, system seq) are in
 * pg-store-writer.test.ts.
 */

const server = postgresForFile();

/** A writer on a store, with its bus and a way to read the store back. */
interface Subject {
  readonly bus: EventBus;
  readonly writer: StoreWriter;
  /** Runs `sql` (no parameters) on the store; the same SQL reads both stores. */
  all(sql: string): Promise<Record<string, unknown>[]>;
  /** Waits until everything emitted is dispatched and committed. */
  flush(): Promise<void>;
}

const WRITERS: readonly { name: string; runs: boolean; open(logger?: Logger): Promise<Subject> }[] = [
  {
    name: 'SQLite (TraceWriter)',
    runs: true,
    open: async (logger) => {
      const context = tempTraceContext(logger === undefined ? {} : { logger });
      return {
        bus: context.bus,
        writer: context.writer,
        all: async (sql) => context.db.prepare(sql).all() as Record<string, unknown>[],
        flush: () => context.flush(),
      };
    },
  },
  {
    name: 'PostgreSQL (PgStoreWriter)',
    runs: postgresTestsRun,
    open: async (logger) => {
      const pg = await openPgWriter(server, logger === undefined ? {} : { logger });
      return {
        bus: pg.bus,
        writer: pg.writer,
        all: async (sql) => (await pg.pool.query(sql)).rows,
        flush: pg.flush,
      };
    },
  },
];

for (const subject of WRITERS) {
  describe.runIf(subject.runs)(`store writer contract: ${subject.name}`, () => {
    it('stores events and rows in queue order: seq per session, the later row change wins', async () => {
      const { bus, writer, all, flush } = await subject.open();
      const settled: string[] = [];
      const emitted: MetisEvent[] = [];
      emitted.push(bus.emit(sessionCreated('sess_a'))!, bus.emit(sessionCreated('sess_b'))!);
      writer.writeRow(recorded(session('sess_a', 1), settled));
      // The session's row in a transaction of its own, so that the next one's rows depend on nothing
      // but their own order (a foreign key error would send them down the one-by-one path).
      await flush();
      const started = bus.emit(turnStarted('sess_a'))!;
      emitted.push(started, bus.emit(turnStarted('sess_b'))!);
      writer.writeRow(recorded(message('msg_1', 'sess_a', 'user', 'first'), settled, 'msg:first'));
      writer.writeRow(recorded(toolCall('call_1', 'running'), settled));
      writer.writeRow(recorded(toolCallUpdate('call_1', 'completed'), settled));
      await flush();
      // A later tick: the same message saved again, and the turn's end.
      writer.writeRow(recorded(message('msg_1', 'sess_a', 'user', 'second'), settled, 'msg:second'));
      emitted.push(bus.emit(turnCompleted('sess_a', started.id))!);
      await flush();

      const stored = await all('SELECT id, session_id, seq FROM events ORDER BY id');
      const ours = stored.filter((row) => row.session_id !== 'system');
      expect(ours.map((row) => row.id)).toEqual(emitted.map((event) => event.id));
      expect(ours.filter((row) => row.session_id === 'sess_a').map((row) => Number(row.seq))).toEqual([
        1, 2, 3,
      ]);
      expect(ours.filter((row) => row.session_id === 'sess_b').map((row) => Number(row.seq))).toEqual([1, 2]);
      expect(await all("SELECT content_json FROM messages WHERE id = 'msg_1'")).toEqual([
        { content_json: '"second"' },
      ]);
      expect(await all("SELECT status FROM tool_calls WHERE id = 'call_1'")).toEqual([
        { status: 'completed' },
      ]);
      expect(await all("SELECT workspace_path FROM sessions WHERE id = 'sess_a'")).toEqual([
        { workspace_path: '/ws/sess_a' },
      ]);
      // sess_b has events and no session.create: the writer gave it a bare row, as SQLite's does.
      expect(await all("SELECT id FROM sessions WHERE id = 'sess_b'")).toEqual([{ id: 'sess_b' }]);
      expect(settled).toEqual([
        'session.create:true',
        'msg:first:true',
        'toolCall.insert:true',
        'toolCall.update:true',
        'msg:second:true',
      ]);
      expect(writer.buffered).toEqual({ events: 0, bytes: 0, items: 0 });
    });

    it('tells onCommit listeners each batch once committed, in emit order, and resolves waiters then', async () => {
      const { bus, writer, all, flush } = await subject.open();
      await flush();
      const batches: string[][] = [];
      const storedWhenTold: boolean[] = [];
      const stop = writer.onCommit((batch) => {
        batches.push(batch.map((event) => event.id));
      });
      const reports: string[] = [];
      writer.onBatch((report) => reports.push(`${report.outcome}:${report.events.length}`));
      const ids: string[] = [];
      for (let tick = 0; tick < 3; tick += 1) {
        for (let i = 0; i < 40; i += 1) ids.push(bus.emit(turnStarted(`sess_${i % 4}`))!.id);
        bus.dispatchNow();
      }
      const last = ids.at(-1)!;
      const acknowledged = writer.whenCommitted(last, 10_000).then(async () => {
        const rows = await all(`SELECT count(*) AS n FROM events WHERE id = '${last}'`);
        storedWhenTold.push(Number(rows[0]!.n) === 1);
      });
      await acknowledged;
      await flush();
      expect(batches.flat()).toEqual(ids);
      expect(storedWhenTold).toEqual([true]);
      expect(reports.every((report) => report.startsWith('committed:'))).toBe(true);
      // An id committed long ago resolves at once.
      await expect(writer.whenCommitted(ids[0]!, 100)).resolves.toBeUndefined();
      stop();
      bus.emit(turnStarted('sess_after'));
      await flush();
      expect(batches.flat()).toHaveLength(ids.length);
    });

    it('rejects a waiter after its timeout with the writer’s storage refusal, and is idle once drained', async () => {
      const { bus, writer, flush } = await subject.open();
      const refused = await writer.whenCommitted('evt_never_emitted', 50).then(
        () => null,
        (error: unknown) => error as { code: string },
      );
      expect(refused?.code).toBe(writer.storageRefusal().code);
      for (let i = 0; i < 100; i += 1) bus.emit(turnStarted('sess_idle'));
      bus.dispatchNow();
      // SQLite has committed already (synchronously); PostgreSQL is under way: both are idle once drained.
      expect(await writer.idle(10_000)).toBe(true);
      expect(writer.buffered).toEqual({ events: 0, bytes: 0, items: 0 });
      await flush();
      expect(writer.failure).toBeNull();
      expect(await writer.idle(1)).toBe(true);
    });

    it('refuses a row that breaks a constraint alone: logged, settled false, the rest of its batch committed', async () => {
      const logs = captureLogs();
      const { bus, writer, all, flush } = await subject.open(logs.logger);
      const settled: string[] = [];
      const dropped: MetisEvent[] = [];
      writer.onDrop((events) => dropped.push(...events));
      const before = writer.stats.rejectedRows;
      writer.writeRow(recorded(session('sess_a', 1), settled));
      const first = bus.emit(turnStarted('sess_a'))!;
      writer.writeRow(recorded(message('msg_good', 'sess_a', 'user', 'ok'), settled, 'msg:good'));
      writer.writeRow(recorded(message('msg_bad', 'sess_a', 'narrator', 'no such role'), settled, 'msg:bad'));
      const second = bus.emit(turnStarted('sess_a', null, 'turn_2'))!;
      writer.writeRow(recorded(message('msg_after', 'sess_a', 'assistant', 'ok'), settled, 'msg:after'));
      await flush();
      await expect(writer.whenCommitted(second.id, 5_000)).resolves.toBeUndefined();
      expect(settled).toEqual(['session.create:true', 'msg:good:true', 'msg:bad:false', 'msg:after:true']);
      expect(writer.stats.rejectedRows - before).toBe(1);
      expect(dropped).toEqual([]);
      expect((await all('SELECT id FROM messages ORDER BY id')).map((row) => row.id)).toEqual([
        'msg_after',
        'msg_good',
      ]);
      await settleLogs();
      expect(logs.at(LEVEL.error).map((record) => record.row)).toEqual(['msg:bad']);
      const events = await all("SELECT id FROM events WHERE session_id = 'sess_a' ORDER BY id");
      expect(events.map((row) => row.id)).toEqual([first.id, second.id]);
    });
  });
}
