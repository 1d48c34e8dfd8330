import { describe, expect, it, onTestFinished } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { silentLogger } from '../../src/core/logger.js';
import { openPostgresContext } from '../../src/core/store/postgres/pg-context.js';
import { pgStorageStall } from '../../src/core/store/postgres/pg-storage-stall.js';
import { pgTraceQueryReads } from '../../src/core/store/postgres/pg-trace-query.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
import { sqliteTraceQueryReads } from '../../src/core/store/trace-query-reads.js';
import type { TraceQuery } from '../../src/plugins/define-plugin.js';
import type { LoadedPlugin } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { RecentEvents } from '../../src/plugins/recent-events.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { emitTurn } from './plugin-harness.js';
import { until } from './receivers.js';

/**
 * A plugin's synchronous trace reads where no file of this process holds the trace (PostgreSQL alone):
 * answered from the newest events the bus dispatched, exactly, or refused with
 * METIS_ERR_TRACE_READ_REFUSED; never part of an answer. The store behind the asynchronous reads here is
 * a SQLite file read through its asynchronous adapter, so every answer can be checked against it.
 */

interface Probe {
  store: TraceQuery | null;
  /** Per event handed to the plugin: what `getEvent` answered for it right then. */
  readonly heldWhenHanded: boolean[];
  /** Per event handed to the plugin: what `async.getEvent` answered for it, asked right then. */
  readonly storedWhenAsked: Promise<MetisEvent | null>[];
}

/** A fast-path plugin that asks about each event as it is handed it. */
function probePlugin(probe: Probe): LoadedPlugin {
  return {
    specifier: './probe.mjs',
    index: 0,
    configPath: null,
    path: 'probe.mjs',
    options: {},
    definition: {
      name: 'probe',
      create: (_options, ctx) => {
        probe.store = ctx.store;
        return {
          fastPath: true,
          filter: { session_ids: ['sess_ring', 'sess_more'] },
          handle(event) {
            probe.heldWhenHanded.push(ctx.store.getEvent(event.id)?.id === event.id);
            probe.storedWhenAsked.push(ctx.store.async.getEvent(event.id));
          },
        };
      },
    },
  };
}

async function hostWithMemory(
  context: Pick<TraceContext, 'bus' | 'writer'>,
  recentEvents: number,
  reads = sqliteTraceQueryReads((context as TraceContext).store),
  commitWaitMs?: number,
): Promise<Probe> {
  const probe: Probe = { store: null, heldWhenHanded: [], storedWhenAsked: [] };
  const host = await startPlugins([probePlugin(probe)], {
    bus: context.bus,
    store: { reads, writer: context.writer, ...(commitWaitMs === undefined ? {} : { commitWaitMs }) },
    logger: silentLogger(),
    dataDir: tempDir(),
    recentEvents,
  });
  onTestFinished(() => host.stop());
  return probe;
}

function refusal(read: () => unknown): string | undefined {
  try {
    read();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

describe('RecentEvents', () => {
  it('forgets what the writer gave up on and remembers that it did, within its bound', () => {
    const context = tempTraceContext();
    const recent = new RecentEvents(2);
    const events = Object.values(emitTurn(context.bus, 'sess_ring'));
    for (const event of events.slice(0, 2)) recent.record(event);
    recent.forget([events[1]!]);
    expect(recent.get(events[0]!.id)).toBe(events[0]);
    expect(recent.get(events[1]!.id)).toBeNull();
    expect(recent.wasDropped(events[1]!.id)).toBe(true);
    // The chain from a dropped parent is not whole: refused, not cut short.
    expect(recent.chain(events[1]!.id)).toBeNull();
    recent.forget(events.slice(2, 4));
    expect(recent.wasDropped(events[1]!.id)).toBe(false);
    expect(recent.wasDropped(events[3]!.id)).toBe(true);
  });
});

describe('the plugin host on a store with no file here', () => {
  it('answers getEvent and causalChain from the events it saw, exactly as the store', async () => {
    const context = tempTraceContext();
    const probe = await hostWithMemory(context, 64);
    const events = emitTurn(context.bus, 'sess_ring');
    await context.flush();
    const store = probe.store!;

    // Each event was held before the plugin was handed it, and an async read asked then found it stored.
    expect(probe.heldWhenHanded).toEqual(Object.values(events).map(() => true));
    expect((await Promise.all(probe.storedWhenAsked)).map((e) => e?.id)).toEqual(
      Object.values(events).map((e) => e.id),
    );
    for (const event of Object.values(events)) {
      expect(store.getEvent(event.id)).toEqual(context.store.getEvent(event.id));
      expect(store.causalChain(event.id)).toEqual(context.store.causalChain(event.id));
    }
    expect(store.causalChain(events.done2!.id).map((e) => e.type)).toEqual([
      'llm.call_completed',
      'llm.call_started',
      'tool.completed',
      'tool.called',
      'llm.call_completed',
      'llm.call_started',
      'turn.started',
    ]);
  });

  it('refuses an event it no longer holds and a chain that leaves it; async answers both in full', async () => {
    const context = tempTraceContext();
    // Of the turn's eight events, the newest four stay: toolDone, call2, done2, completed.
    const probe = await hostWithMemory(context, 4);
    const events = emitTurn(context.bus, 'sess_ring');
    await context.flush();
    const store = probe.store!;

    expect(store.getEvent(events.completed!.id)).toEqual(context.store.getEvent(events.completed!.id));
    expect(refusal(() => store.getEvent(events.turn!.id))).toBe('METIS_ERR_TRACE_READ_REFUSED');
    // done2 → call2 → toolDone are held, tool is not: no part of the chain is answered.
    expect(refusal(() => store.causalChain(events.done2!.id))).toBe('METIS_ERR_TRACE_READ_REFUSED');
    expect(refusal(() => store.causalChain(events.completed!.id))).toBe('METIS_ERR_TRACE_READ_REFUSED');
    expect(await store.async.causalChain(events.done2!.id)).toEqual(
      context.store.causalChain(events.done2!.id),
    );
    expect(await store.async.getEvent(events.turn!.id)).toEqual(context.store.getEvent(events.turn!.id));
    expect(await store.async.getEvent('evt_none')).toBeNull();
  });

  it('refuses history and content reads, which the bus does not carry; async answers them', async () => {
    const context = tempTraceContext();
    const probe = await hostWithMemory(context, 64);
    const events = emitTurn(context.bus, 'sess_ring');
    await context.flush();
    const store = probe.store!;
    const query = { sessionIds: ['sess_ring'], afterId: null, limit: 100 };
    for (const read of [
      () => store.replay(query),
      () => store.sessionEvents('sess_ring'),
      () => store.messagesBefore?.('sess_ring', events.completed!.id, 10),
      () => store.toolCall?.('sess_ring', 'tu_1'),
    ])
      expect(refusal(read)).toBe('METIS_ERR_TRACE_READ_REFUSED');
    expect((await store.async.replay(query)).events).toEqual(context.store.sessionEvents('sess_ring'));
    expect(await store.async.sessionEvents('sess_ring')).toEqual(context.store.sessionEvents('sess_ring'));
    expect((await store.async.sessionEvents('sess_ring')).length).toBe(8);
  });
});

const postgres = postgresForFile();

describe.runIf(postgresTestsRun)('the plugin host on PostgreSQL alone', () => {
  it('an async read asked as an event is handed waits for it to be committed, then finds it', async () => {
    const context = await openPostgresContext({ url: freshDatabase(postgres), setting: '--store' });
    onTestFinished(() => context.close());
    const probe = await hostWithMemory(context, 64, pgTraceQueryReads(context.pool));
    // A new session, as the runtime seeds it (the bus asks no PostgreSQL store for a seq).
    context.bus.seedSeq('sess_ring', 0);
    const events = emitTurn(context.bus, 'sess_ring');
    await until(() => probe.storedWhenAsked.length === 8);
    const found = await Promise.all(probe.storedWhenAsked);
    expect(found.map((event) => event?.id)).toEqual(Object.values(events).map((event) => event.id));
    expect(probe.heldWhenHanded.every(Boolean)).toBe(true);
    // The memory's chain is the store's.
    const store = probe.store!;
    expect(store.causalChain(events.done2!.id)).toEqual(await store.async.causalChain(events.done2!.id));
  });

  it('an async read whose events are not committed in time is refused, not answered without them', async () => {
    const url = freshDatabase(postgres);
    const context = await openPostgresContext({ url, setting: '--store' });
    onTestFinished(() => context.close());
    const probe = await hostWithMemory(context, 64, pgTraceQueryReads(context.pool), 300);
    context.bus.seedSeq('sess_ring', 0);
    const release = await pgStorageStall(url).hold(10_000);
    const events = emitTurn(context.bus, 'sess_ring');
    await until(() => probe.storedWhenAsked.length === 8);
    const answers = await Promise.allSettled(probe.storedWhenAsked);
    expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 'rejected'));
    expect((answers[0] as PromiseRejectedResult).reason).toMatchObject({
      code: 'METIS_ERR_STORE_UNAVAILABLE',
    });
    await release();
    await context.flush();
    expect((await probe.store!.async.getEvent(events.turn!.id))?.id).toBe(events.turn!.id);
  }, 30_000);
});
