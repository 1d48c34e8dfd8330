import type { Logger } from 'pino';
import { DeadlineExceeded, type latch, withDeadline } from '../core/deadline.js';

/** What the guard reads and updates on a running plugin. */
export interface GuardedPlugin {
  readonly name: string;
  readonly logger: Logger;
  /** Why the plugin gets no more events, or null while it does. */
  disabled: string | null;
  /** Events that reached the guard after the plugin was disabled or the host began to stop. */
  skipped: number;
  /** Handler calls in flight, for naming the busy plugins at shutdown. */
  busy: number;
  /** Handler calls that overran `handlerMs` (GET /plugins, metis_plugin_timeouts_total). */
  timeouts: number;
}

export interface GuardOptions {
  readonly handlerMs: number;
  /** Fired when the host stops: waits in flight are abandoned, later events skipped. */
  readonly shutdown: ReturnType<typeof latch>;
  /** Called once, on the first handler over `handlerMs`: the host removes the subscription. */
  readonly disable: (reason: string) => void;
}

/**
 * Wraps a mailbox plugin's `handle` or `handleBatch` so that one call can hold its mailbox for at most
 * `handlerMs` (issue 12, observation 5). A call that overruns it disables the plugin: a handler that
 * never settled once will most likely not settle next time either, and each further call would pile up
 * another unsettled promise and hold every later event for `handlerMs` more. Skipping ahead and calling
 * it again was the alternative; see docs/decisions.md "Bounded waits on plugins".
 *
 * The overrun call is counted as failed (the bus logs it with the plugin's subscription name); events
 * that arrive after the plugin was disabled are skipped and counted as dropped.
 */
export function guardHandler<A>(
  plugin: GuardedPlugin,
  call: (arg: A) => unknown,
  count: (arg: A) => number,
  what: string,
  options: GuardOptions,
): (arg: A) => Promise<void> | undefined {
  return (arg) => {
    if (plugin.disabled !== null || options.shutdown.fired) {
      plugin.skipped += count(arg);
      return undefined;
    }
    const result = call(arg);
    if (!isThenable(result)) return undefined;
    plugin.busy += 1;
    return withDeadline(
      result,
      options.handlerMs,
      `plugin "${plugin.name}" ${what}`,
      options.shutdown.promise,
    )
      .then(
        () => undefined,
        (error: unknown) => {
          if (error instanceof DeadlineExceeded) plugin.timeouts += 1;
          if (error instanceof DeadlineExceeded && plugin.disabled === null) {
            plugin.disabled = `${error.message}; disabled`;
            options.disable(error.message);
          }
          throw error;
        },
      )
      .finally(() => {
        plugin.busy -= 1;
      });
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
