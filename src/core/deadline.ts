/**
 * Bounded waits (issue 12, observation 5). Every wait on code metis does not own (a config file's
 * top-level await, a plugin's import, start, handle or stop) goes through `withDeadline`, so a promise
 * that never settles becomes a named timeout instead of a hang.
 *
 * The timer is deliberately *not* unref'd. A promise that never settles holds no handle of its own; with
 * an unref'd timer the event loop could empty while we wait, and Node then exits 13 ("unsettled
 * top-level await") with no message, or skips the rest of a shutdown (closing the database, releasing
 * the lock). The ref'd timer keeps the process alive until the deadline says what happened.
 */

/** A wait on someone else's code ran out of time. */
export class DeadlineExceeded extends Error {
  constructor(
    /** What was waited for, e.g. `plugin "x" start()`. */
    readonly what: string,
    readonly ms: number,
  ) {
    super(`${what} did not settle within ${ms} ms`);
    this.name = 'DeadlineExceeded';
  }
}

/** A wait given up because the process is shutting down, not because its own deadline passed. */
export class WaitAbandoned extends Error {
  constructor(readonly what: string) {
    super(`${what} was still running at shutdown; no longer waited for`);
    this.name = 'WaitAbandoned';
  }
}

/**
 * Settles as `work` does, or rejects with DeadlineExceeded after `ms`, or with WaitAbandoned as soon as
 * `abandon` resolves. `work` keeps running either way: JavaScript cannot cancel it, only stop waiting.
 */
export function withDeadline<T>(
  work: PromiseLike<T> | T,
  ms: number,
  what: string,
  abandon?: Promise<void>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const racers: Promise<T>[] = [
    Promise.resolve(work),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new DeadlineExceeded(what, ms)), Math.max(0, ms));
    }),
  ];
  if (abandon !== undefined) {
    racers.push(abandon.then(() => Promise.reject(new WaitAbandoned(what))));
  }
  return Promise.race(racers).finally(() => clearTimeout(timer));
}

/** A one-shot signal: `promise` resolves once `fire()` was called. */
export function latch(): { readonly promise: Promise<void>; fire(): void; readonly fired: boolean } {
  let resolve!: () => void;
  let fired = false;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return {
    promise,
    fire: () => {
      fired = true;
      resolve();
    },
    get fired() {
      return fired;
    },
  };
}
