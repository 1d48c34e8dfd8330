import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { EventBus } from '../core/bus/event-bus.js';
import { Mailbox } from '../core/bus/mailbox.js';
import { isSlow, slow } from '../core/bus/slow.js';
import type { SubscriptionHandle, SubscriptionStats } from '../core/bus/subscription.js';
import { DeadlineExceeded, latch, withDeadline } from '../core/deadline.js';
import { FastPathHandlerError, MetisError } from '../core/errors.js';
import type { MetisEvent } from '../core/events/envelope.js';
import { describeFilter, toEventFilter } from '../core/events/filter.js';
import { TraceStore } from '../core/store/trace-store.js';
import { checkInstance } from './check-instance.js';
import type { PluginContext, PluginFilter, PluginInstance, TraceQuery } from './define-plugin.js';
import { type GuardedPlugin, type GuardOptions, guardHandler } from './handler-deadline.js';
import { describeSource, type LoadedPlugin } from './load-plugins.js';
import { RecentEvents } from './recent-events.js';
import { stopPlugins } from './stop-plugins.js';
import { type RemoteTrace, recentTraceQuery, sqliteTraceQuery } from './trace-query.js';

/** One line of `metis plugins` and `GET /plugins`. */
export interface PluginStatus {
  readonly name: string;
  readonly specifier: string;
  readonly path: string;
  readonly index: number;
  readonly fast_path: boolean;
  /** True once a fast-path plugin overran its budget and was moved to a mailbox. */
  readonly demoted: boolean;
  /** Why the plugin no longer receives events (a handler over `plugin_timeouts.handler_ms`), or null. */
  readonly disabled: string | null;
  /** Handler calls that overran `plugin_timeouts.handler_ms`. */
  readonly timeouts: number;
  readonly filter: Record<string, string[] | null>;
  readonly delivered: number;
  readonly failed: number;
  readonly dropped: number;
  /** The plugin's own counters (`stats()`), if it keeps any. */
  readonly stats: Readonly<Record<string, number>> | null;
}

export interface PluginHost {
  list(): PluginStatus[];
  /**
   * Delivers what is queued (within `stop_ms`), unsubscribes, then stops each plugin, newest first
   * (each within `stop_ms`). Never waits past `deadline` (a `Date.now()` time) when one is given: what
   * is still running then is abandoned and named in the log. Safe to call twice.
   */
  stop(options?: { deadline?: number }): Promise<void>;
}

/** How long the host waits on plugin code (config `plugin_timeouts`, docs/configuration.md). */
export interface PluginTimeouts {
  /** `create()` and `start()`, each. */
  readonly startMs: number;
  /** One `handle()` / `handleBatch()` call from a mailbox. */
  readonly handlerMs: number;
  /** Delivering what is queued at shutdown, then each `stop()`. */
  readonly stopMs: number;
}

export const DEFAULT_PLUGIN_TIMEOUTS: PluginTimeouts = { startMs: 10_000, handlerMs: 30_000, stopMs: 5_000 };

export interface PluginEnvironment {
  readonly bus: EventBus;
  /**
   * The trace plugins read: a SQLite store, or the reads and writer of a store with no file here
   * (PostgreSQL alone), whose synchronous reads the host answers from memory where exact (define-plugin.ts).
   */
  readonly store: TraceStore | RemoteTrace;
  /** With a RemoteTrace: how many recent events the host keeps for synchronous reads (RECENT_EVENTS_KEPT). */
  readonly recentEvents?: number;
  readonly logger: Logger;
  /** The folder that holds the database. */
  readonly dataDir: string;
  readonly timeouts?: Partial<PluginTimeouts>;
}

/**
 * The fast path's budget (bus spec §3.4: "anything that can't reliably finish in <1ms per event must be
 * batch"). One call over FAST_PATH_MAX_CALL_MS, or an average over 1 ms across FAST_PATH_WINDOW calls,
 * moves the plugin to a mailbox: it keeps its events but stops running inside the dispatch worker.
 */
const FAST_PATH_MAX_CALL_MS = 10;
const FAST_PATH_WINDOW = 100;
const FAST_PATH_AVERAGE_MS = 1;
const DEMOTED_MAILBOX_LIMIT = 10_000;

interface Running extends GuardedPlugin {
  readonly plugin: LoadedPlugin;
  readonly instance: PluginInstance;
  readonly logger: Logger;
  handle: SubscriptionHandle | null;
  /** Set when a fast-path plugin was demoted; counts what reached `handle` from then on. */
  mailbox: Mailbox | null;
  readonly mailboxStats: SubscriptionStats;
  /** Fast path: events forwarded to the mailbox (counted as delivered by the bus) and async rejections. */
  forwarded: number;
  asyncFailed: number;
  /** Failures the host logged itself (demoted mailbox, async rejections), for throttling. */
  logged: number;
}

/**
 * The trace plugins read: a SQLite store's own reads, or, on a store with no file here, the newest
 * events this process dispatched (a fast-path subscription taken before any plugin's, so a plugin is
 * never handed an event the memory has not seen) in front of the store's asynchronous reads.
 */
function traceFor(
  env: PluginEnvironment,
  keepMemory: boolean,
): { query: TraceQuery; memory: SubscriptionHandle | null } {
  const { store } = env;
  if (store instanceof TraceStore) return { query: sqliteTraceQuery(store), memory: null };
  const recent = new RecentEvents(env.recentEvents);
  if (!keepMemory) return { query: recentTraceQuery(recent, store), memory: null };
  const memory = env.bus.subscribe({
    name: 'plugin-host:recent-events',
    fastPath: true,
    knownTypes: 'all',
    handler: (event) => recent.record(event),
  });
  return { query: recentTraceQuery(recent, store), memory };
}

/**
 * Creates, starts and subscribes every loaded plugin, in config order. A failure stops the ones already
 * started and rethrows, so `metis serve` never runs with half its plugins.
 *
 *   bus drain ──▶ fast path:  timed wrapper ──▶ handle()         (over budget ──▶ own mailbox)
 *             └─▶ batch path: bus mailbox ────▶ handleBatch() or handle(), one at a time
 */
export async function startPlugins(
  plugins: readonly LoadedPlugin[],
  env: PluginEnvironment,
): Promise<PluginHost> {
  const timeouts: PluginTimeouts = { ...DEFAULT_PLUGIN_TIMEOUTS, ...env.timeouts };
  // No plugin, no memory to keep: a server without plugins pays nothing for it.
  const trace = traceFor(env, plugins.length > 0);
  const host: HostState = { env, timeouts, store: trace.query, shutdown: latch() };
  const running: Running[] = [];
  let stopping: Promise<void> | null = null;

  const stop = (options: { deadline?: number } = {}): Promise<void> => {
    stopping ??= stopPlugins(
      running,
      { bus: env.bus, logger: env.logger, stopMs: timeouts.stopMs, shutdown: host.shutdown },
      options.deadline ?? Number.POSITIVE_INFINITY,
    ).finally(() => {
      if (trace.memory !== null) env.bus.unsubscribe(trace.memory);
    });
    return stopping;
  };

  try {
    for (const plugin of plugins) running.push(await startOne(plugin, host));
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    stop,
    list: () => running.map(status),
  };
}

interface HostState {
  readonly env: PluginEnvironment;
  readonly timeouts: PluginTimeouts;
  readonly store: TraceQuery;
  /** Fired when the host stops waiting for handlers: every wait on one is abandoned at once. */
  readonly shutdown: ReturnType<typeof latch>;
}

/**
 * Calls the plugin's `create` and checks what it returns. `metis plugins` calls this alone, without
 * `start`, to learn a plugin's filter: `create` builds objects; files, sockets and timers belong in
 * `start`.
 */
export async function createInstance(
  plugin: LoadedPlugin,
  env: { logger: Logger; store: TraceQuery; dataDir: string; timeoutMs?: number },
): Promise<{ instance: PluginInstance; logger: Logger }> {
  const name = plugin.definition.name;
  const logger = env.logger.child({ plugin: name });
  const ctx: PluginContext = {
    name,
    logger,
    store: env.store,
    dataDir: env.dataDir,
    configDir: plugin.configPath === null ? null : dirname(plugin.configPath),
  };
  const where = describeSource(plugin);
  const timeoutMs = env.timeoutMs ?? DEFAULT_PLUGIN_TIMEOUTS.startMs;
  try {
    const created = await withDeadline(
      (async () => plugin.definition.create(plugin.options, ctx))(),
      timeoutMs,
      'create()',
    );
    return { instance: checkInstance(created, where), logger };
  } catch (error) {
    if (error instanceof MetisError) throw error;
    throw startError(where, 'create()', error);
  }
}

/** METIS_ERR_PLUGIN_START for a `create()` or `start()` that threw or did not settle in time. */
function startError(where: string, step: string, error: unknown): MetisError {
  if (error instanceof DeadlineExceeded) {
    return new MetisError(
      'METIS_ERR_PLUGIN_START',
      `${where}: ${step} did not settle within ${error.ms} ms; fix the plugin, raise ` +
        'plugin_timeouts.start_ms or remove it from config',
      { cause: error },
    );
  }
  return new MetisError('METIS_ERR_PLUGIN_START', `${where}: ${step} threw: ${(error as Error).message}`, {
    cause: error,
  });
}

async function startOne(plugin: LoadedPlugin, host: HostState): Promise<Running> {
  const { env } = host;
  const where = describeSource(plugin);
  const name = plugin.definition.name;
  const { instance, logger } = await createInstance(plugin, {
    logger: env.logger,
    store: host.store,
    dataDir: env.dataDir,
    timeoutMs: host.timeouts.startMs,
  });
  const entry: Running = {
    name,
    disabled: null,
    skipped: 0,
    busy: 0,
    timeouts: 0,
    plugin,
    instance,
    logger,
    handle: null,
    mailbox: null,
    mailboxStats: { delivered: 0, failed: 0, dropped: 0, skippedUnknown: 0 },
    forwarded: 0,
    asyncFailed: 0,
    logged: 0,
  };
  try {
    await withDeadline((async () => instance.start?.())(), host.timeouts.startMs, 'start()');
  } catch (error) {
    throw startError(where, 'start()', error);
  }
  try {
    entry.handle = subscribe(entry, host, name);
  } catch (error) {
    await withDeadline((async () => instance.stop?.())(), host.timeouts.stopMs, 'stop()').catch(() => {});
    if (error instanceof FastPathHandlerError) {
      throw new MetisError(
        'METIS_ERR_FAST_PATH_HANDLER',
        `${where}: its handle is marked slow() and cannot run on the fast path; return fastPath: false`,
      );
    }
    throw error;
  }
  return entry;
}

function subscribe(entry: Running, host: HostState, name: string): SubscriptionHandle {
  const { env } = host;
  const { instance } = entry;
  const filter = toEventFilter(instance.filter as PluginFilter | undefined);
  const subscriptionName = `plugin:${name}`;
  const guard: GuardOptions = {
    handlerMs: host.timeouts.handlerMs,
    shutdown: host.shutdown,
    disable: (reason) => {
      entry.logger.error(
        { timeout_ms: host.timeouts.handlerMs },
        `plugin "${name}" disabled: ${reason}; it gets no more events (raise plugin_timeouts.handler_ms or fix the plugin)`,
      );
      if (entry.handle) env.bus.unsubscribe(entry.handle, 'removed_after_errors');
    },
  };
  const handle = guardHandler(
    entry,
    (event: MetisEvent) => instance.handle(event),
    () => 1,
    'handle()',
    guard,
  );
  if (instance.fastPath !== true) {
    const handleBatch = instance.handleBatch;
    return env.bus.subscribe({
      name: subscriptionName,
      filter,
      fastPath: false,
      ...(handleBatch
        ? {
            batchHandler: guardHandler(
              entry,
              (events: readonly MetisEvent[]) => handleBatch(events),
              (events) => events.length,
              'handleBatch()',
              guard,
            ),
          }
        : { handler: handle }),
    });
  }
  let calls = 0;
  let windowMs = 0;
  const demote = (reason: string, ms: number) => {
    entry.mailbox = new Mailbox(
      { name: subscriptionName, handler: handle },
      entry.mailboxStats,
      DEMOTED_MAILBOX_LIMIT,
      (error, events) => logFailure(entry, error, events[0]),
      entry.logger,
    );
    entry.logger.warn(
      { took_ms: Number(ms.toFixed(2)), reason },
      'fast-path plugin overran its budget; moved to a mailbox so it no longer delays dispatch',
    );
  };
  const handler = (event: MetisEvent): void => {
    if (entry.mailbox !== null) {
      entry.forwarded += 1;
      entry.mailbox.offer([event]);
      return;
    }
    const started = performance.now();
    try {
      const result = instance.handle(event);
      if (result instanceof Promise) {
        result.catch((error: unknown) => {
          entry.asyncFailed += 1;
          logFailure(entry, error, event);
        });
      }
    } finally {
      const ms = performance.now() - started;
      calls += 1;
      windowMs += ms;
      if (ms > FAST_PATH_MAX_CALL_MS) demote(`one call over ${FAST_PATH_MAX_CALL_MS} ms`, ms);
      else if (calls === FAST_PATH_WINDOW) {
        if (windowMs / calls > FAST_PATH_AVERAGE_MS) {
          demote(`average over ${FAST_PATH_AVERAGE_MS} ms across ${calls} calls`, windowMs / calls);
        }
        calls = 0;
        windowMs = 0;
      }
    }
  };
  // A handle marked slow() keeps its mark, so the bus refuses it on the fast path (bus §3.4).
  return env.bus.subscribe({
    name: subscriptionName,
    filter,
    fastPath: true,
    handler: isSlow(instance.handle) ? slow(handler) : handler,
  });
}

/** As the bus does: the first ten failures in full, then one line per hundred. */
function logFailure(entry: Running, error: unknown, event: MetisEvent | undefined): void {
  entry.logged += 1;
  if (entry.logged > 10 && entry.logged % 100 !== 0) return;
  entry.logger.warn(
    {
      subscription: `plugin:${entry.plugin.definition.name}`,
      event_id: event?.id,
      event_type: event?.type,
      error_count: entry.logged,
      err: error instanceof Error ? { name: error.name, message: error.message } : String(error),
    },
    'event handler failed',
  );
}

function status(entry: Running): PluginStatus {
  const bus = entry.handle?.stats ?? { delivered: 0, failed: 0, dropped: 0, skippedUnknown: 0 };
  let own: Readonly<Record<string, number>> | null = null;
  try {
    own = entry.instance.stats?.() ?? null;
  } catch (error) {
    entry.logger.warn({ err: (error as Error)?.message }, 'plugin stats() failed');
  }
  const mailbox = entry.mailboxStats;
  return {
    name: entry.plugin.definition.name,
    specifier: entry.plugin.specifier,
    path: entry.plugin.path,
    index: entry.plugin.index,
    fast_path: entry.instance.fastPath === true && entry.mailbox === null,
    demoted: entry.mailbox !== null,
    disabled: entry.disabled,
    timeouts: entry.timeouts,
    filter: describeFilter(toEventFilter(entry.instance.filter as PluginFilter | undefined)),
    // The guard returns normally for a skipped event, so the mailbox counted it delivered.
    delivered: bus.delivered - entry.forwarded - entry.asyncFailed + mailbox.delivered - entry.skipped,
    failed: bus.failed + entry.asyncFailed + mailbox.failed + (own?.failed ?? 0),
    dropped: bus.dropped + mailbox.dropped + entry.skipped + (own?.dropped ?? 0),
    stats: own,
  };
}
