import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { EventBus } from '../core/bus/event-bus.js';
import { Mailbox } from '../core/bus/mailbox.js';
import { isSlow, slow } from '../core/bus/slow.js';
import type { SubscriptionHandle, SubscriptionStats } from '../core/bus/subscription.js';
import { FastPathHandlerError, MetisError } from '../core/errors.js';
import { CATALOG } from '../core/events/catalog/index.js';
import { ACTORS, type MetisEvent } from '../core/events/envelope.js';
import { describeFilter, toEventFilter } from '../core/events/filter.js';
import { rowToEvent } from '../core/store/event-rows.js';
import type { TraceStore } from '../core/store/trace-store.js';
import type { PluginContext, PluginFilter, PluginInstance, TraceQuery } from './define-plugin.js';
import { describeSource, type LoadedPlugin } from './load-plugins.js';

/** One line of `metis plugins` and `GET /plugins`. */
export interface PluginStatus {
  readonly name: string;
  readonly specifier: string;
  readonly path: string;
  readonly index: number;
  readonly fast_path: boolean;
  /** True once a fast-path plugin overran its budget and was moved to a mailbox. */
  readonly demoted: boolean;
  readonly filter: Record<string, string[] | null>;
  readonly delivered: number;
  readonly failed: number;
  readonly dropped: number;
  /** The plugin's own counters (`stats()`), if it keeps any. */
  readonly stats: Readonly<Record<string, number>> | null;
}

export interface PluginHost {
  list(): PluginStatus[];
  /** Delivers what is queued, unsubscribes, then stops each plugin, newest first. Safe to call twice. */
  stop(): Promise<void>;
}

export interface PluginEnvironment {
  readonly bus: EventBus;
  readonly store: TraceStore;
  readonly logger: Logger;
  /** The folder that holds the database. */
  readonly dataDir: string;
  /** Bound on delivering queued events and on each `stop()` at shutdown (default 5 s). */
  readonly stopTimeoutMs?: number;
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

interface Running {
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

function traceQuery(store: TraceStore): TraceQuery {
  return {
    replay: (query) => {
      const { rows, tooLarge } = store.replay(query);
      return { events: rows.map(rowToEvent), tooLarge };
    },
    sessionEvents: (sessionId) => store.sessionEvents(sessionId),
    getEvent: (id) => store.getEvent(id),
    causalChain: (eventId) => store.causalChain(eventId),
  };
}

function checkInstance(value: unknown, where: string): PluginInstance {
  const fail = (problem: string) =>
    new MetisError(
      'METIS_ERR_PLUGIN_EXPORT',
      `${where}: create() must return { handle(event), filter?, fastPath?, start?, stop? }; ${problem}`,
    );
  if (value === null || typeof value !== 'object')
    throw fail(`got ${value === null ? 'null' : typeof value}`);
  const instance = value as Record<string, unknown>;
  if (typeof instance.handle !== 'function') throw fail('"handle" is not a function');
  for (const key of ['handleBatch', 'start', 'stop', 'stats']) {
    if (instance[key] !== undefined && typeof instance[key] !== 'function') {
      throw fail(`"${key}" is not a function`);
    }
  }
  if (instance.fastPath !== undefined && typeof instance.fastPath !== 'boolean') {
    throw fail('"fastPath" is not a boolean');
  }
  checkFilter(instance.filter, fail);
  return value as PluginInstance;
}

function checkFilter(filter: unknown, fail: (problem: string) => Error): void {
  if (filter === undefined || filter === null) return;
  if (typeof filter !== 'object' || Array.isArray(filter)) throw fail('"filter" is not an object');
  const known: Record<string, (value: string) => boolean> = {
    session_ids: () => true,
    event_types: (type) => CATALOG.has(type),
    actors: (actor) => (ACTORS as readonly string[]).includes(actor),
  };
  for (const [key, list] of Object.entries(filter)) {
    const isKnown = known[key];
    if (isKnown === undefined) {
      throw fail(`filter.${key} is not one of session_ids, event_types, actors`);
    }
    if (list === null || list === undefined) continue;
    if (!Array.isArray(list) || list.some((item) => typeof item !== 'string')) {
      throw fail(`filter.${key} must be an array of strings or null`);
    }
    const unknown = (list as string[]).find((item) => !isKnown(item));
    if (unknown !== undefined) throw fail(`filter.${key} has an unknown value "${unknown}"`);
  }
}

function withTimeout(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  return Promise.race([promise.then(() => true), timeout]).finally(() => clearTimeout(timer));
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
  const stopTimeoutMs = env.stopTimeoutMs ?? 5000;
  const store = traceQuery(env.store);
  const running: Running[] = [];
  let stopping: Promise<void> | null = null;

  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      const delivered = withTimeout(
        (async () => {
          await env.bus.flush();
          await Promise.all(running.map((r) => r.mailbox?.idle()));
        })(),
        stopTimeoutMs,
      );
      if (!(await delivered))
        env.logger.warn(
          { timeout_ms: stopTimeoutMs },
          'plugins: queued events not all delivered at shutdown',
        );
      for (const r of [...running].reverse()) if (r.handle) env.bus.unsubscribe(r.handle, 'shutdown');
      for (const r of [...running].reverse()) {
        if (!r.instance.stop) continue;
        try {
          if (!(await withTimeout(Promise.resolve(r.instance.stop()), stopTimeoutMs))) {
            r.logger.warn({ timeout_ms: stopTimeoutMs }, 'plugin stop() timed out');
          }
        } catch (error) {
          r.logger.warn({ err: (error as Error).message }, 'plugin stop() failed');
        }
      }
    })();
    return stopping;
  };

  try {
    for (const plugin of plugins) running.push(await startOne(plugin, env, store));
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    stop,
    list: () => running.map(status),
  };
}

/**
 * Calls the plugin's `create` and checks what it returns. `metis plugins` calls this alone, without
 * `start`, to learn a plugin's filter: `create` builds objects; files, sockets and timers belong in
 * `start`.
 */
export async function createInstance(
  plugin: LoadedPlugin,
  env: { logger: Logger; store: TraceQuery; dataDir: string },
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
  try {
    return { instance: checkInstance(await plugin.definition.create(plugin.options, ctx), where), logger };
  } catch (error) {
    if (error instanceof MetisError) throw error;
    throw new MetisError('METIS_ERR_PLUGIN_START', `${where}: create() threw: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

async function startOne(plugin: LoadedPlugin, env: PluginEnvironment, store: TraceQuery): Promise<Running> {
  const where = describeSource(plugin);
  const name = plugin.definition.name;
  const { instance, logger } = await createInstance(plugin, {
    logger: env.logger,
    store,
    dataDir: env.dataDir,
  });
  const entry: Running = {
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
    await instance.start?.();
  } catch (error) {
    throw new MetisError('METIS_ERR_PLUGIN_START', `${where}: start() threw: ${(error as Error).message}`, {
      cause: error,
    });
  }
  try {
    entry.handle = subscribe(entry, env, name);
  } catch (error) {
    await Promise.resolve(instance.stop?.()).catch(() => {});
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

function subscribe(entry: Running, env: PluginEnvironment, name: string): SubscriptionHandle {
  const { instance } = entry;
  const filter = toEventFilter(instance.filter as PluginFilter | undefined);
  const subscriptionName = `plugin:${name}`;
  if (instance.fastPath !== true) {
    return env.bus.subscribe({
      name: subscriptionName,
      filter,
      fastPath: false,
      ...(instance.handleBatch
        ? { batchHandler: (events) => instance.handleBatch!(events) }
        : { handler: (event) => instance.handle(event) }),
    });
  }
  let calls = 0;
  let windowMs = 0;
  const demote = (reason: string, ms: number) => {
    entry.mailbox = new Mailbox(
      { name: subscriptionName, handler: (event) => instance.handle(event) },
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
    filter: describeFilter(toEventFilter(entry.instance.filter as PluginFilter | undefined)),
    delivered: bus.delivered - entry.forwarded - entry.asyncFailed + mailbox.delivered,
    failed: bus.failed + entry.asyncFailed + mailbox.failed + (own?.failed ?? 0),
    dropped: bus.dropped + mailbox.dropped + (own?.dropped ?? 0),
    stats: own,
  };
}
