import type { Logger } from 'pino';
import type { EventBus } from '../core/bus/event-bus.js';
import type { Mailbox } from '../core/bus/mailbox.js';
import type { SubscriptionHandle } from '../core/bus/subscription.js';
import { DeadlineExceeded, type latch, withDeadline } from '../core/deadline.js';
import type { PluginInstance } from './define-plugin.js';

/** What stopping needs of a running plugin. */
export interface StoppablePlugin {
  readonly name: string;
  readonly instance: PluginInstance;
  readonly logger: Logger;
  readonly handle: SubscriptionHandle | null;
  readonly mailbox: Mailbox | null;
  /** Handler calls in flight. */
  readonly busy: number;
}

export interface StopContext {
  readonly bus: EventBus;
  readonly logger: Logger;
  readonly stopMs: number;
  /** Fired once the queued events had their chance: every wait on a handler is abandoned. */
  readonly shutdown: ReturnType<typeof latch>;
}

/** Milliseconds from now to `deadline`, at most `ms`. */
function until(deadline: number, ms: number): number {
  return Math.max(0, Math.min(ms, deadline - Date.now()));
}

/**
 * Stops the plugins (issue 12, observation 5: never waits past `deadline`): delivers what is queued
 * within `stopMs`, abandons the waits on handlers still running, unsubscribes, then stops each plugin,
 * newest first, each within `stopMs`. What overruns is logged with the plugin's name.
 */
export async function stopPlugins(
  running: readonly StoppablePlugin[],
  context: StopContext,
  deadline: number,
): Promise<void> {
  const { bus, logger, stopMs } = context;
  const newestFirst = [...running].reverse();
  try {
    await withDeadline(
      (async () => {
        await bus.flush();
        await Promise.all(running.map((r) => r.mailbox?.idle()));
      })(),
      until(deadline, stopMs),
      'delivering the queued events to plugins',
    );
  } catch (error) {
    // Name the plugins still busy, so an operator knows whose events were not all delivered.
    const busy = running.filter((r) => r.busy > 0).map((r) => r.name);
    logger.warn(
      { timeout_ms: stopMs, plugins: busy, err: (error as Error).message },
      `plugins: queued events not all delivered at shutdown${busy.length ? ` (still busy: ${busy.join(', ')})` : ''}`,
    );
  }
  // From here no wait on a handler holds the shutdown: pending ones are abandoned, queued events skipped.
  context.shutdown.fire();
  for (const r of newestFirst) if (r.handle) bus.unsubscribe(r.handle, 'shutdown');
  for (const r of newestFirst) {
    if (!r.instance.stop) continue;
    const what = `plugin "${r.name}" stop()`;
    try {
      await withDeadline((async () => r.instance.stop!())(), until(deadline, stopMs), what);
    } catch (error) {
      const timedOut = error instanceof DeadlineExceeded;
      r.logger.error(
        { timeout_ms: timedOut ? error.ms : undefined, err: (error as Error).message },
        timedOut ? `${what} did not settle within ${error.ms} ms; abandoned` : `${what} failed`,
      );
    }
  }
}
