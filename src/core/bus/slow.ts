const SLOW = Symbol.for('metis.slowHandler');

/**
 * Marks a handler as too slow for the fast path (bus spec §3.4, §9.1 test 4). Subscribing a marked
 * handler with `fastPath: true` throws `FastPathHandlerError`.
 *
 * @example
 * bus.subscribe({ name: 'indexer', fastPath: false, handler: slow(async (e) => index(e)) });
 */
export function slow<F extends (...args: never[]) => unknown>(handler: F): F {
  Object.defineProperty(handler, SLOW, { value: true });
  return handler;
}

export function isSlow(handler: unknown): boolean {
  return typeof handler === 'function' && (handler as unknown as Record<symbol, unknown>)[SLOW] === true;
}
