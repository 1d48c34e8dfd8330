/**
 * Whether a synchronous trace read was refused (define-plugin.ts `TraceQuery`): its exact answer is then
 * to be had from `ctx.store.async`. By code, so a plugin that imports nothing of metis can tell too.
 */
export function isTraceReadRefused(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'METIS_ERR_TRACE_READ_REFUSED';
}

/**
 * A trace read answered at the call where the store can (SQLite, or memory on PostgreSQL alone), else
 * the asynchronous read's promise: a plugin stays synchronous wherever the synchronous answer is exact.
 */
export function readNowOrLater<T>(now: () => T, later: () => Promise<T>): T | Promise<T> {
  try {
    return now();
  } catch (error) {
    if (isTraceReadRefused(error)) return later();
    throw error;
  }
}

/** `then` for a value that may or may not be a promise: synchronous when it is not. `R` is no promise. */
export function thenOrNow<T, R>(value: T | Promise<T>, then: (value: T) => R): R | Promise<R> {
  return value instanceof Promise ? (value.then(then) as Promise<R>) : then(value);
}
