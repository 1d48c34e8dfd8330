import { MetisError } from '../errors.js';
import { asStorageError } from './storage-errors.js';
import type { StoreUpstream } from './store-upstream.js';

/** Network errors of a connection to a server that is away (stopped, restarting, cut off). */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * SQLSTATEs of a server that is away rather than of a wrong request: class 08 (connection exception),
 * 57P01-57P03 (shut down by an administrator or a crash, not accepting connections yet), 53300 (no
 * connection slot left).
 */
function unreachableState(code: string): boolean {
  return (
    code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300'
  );
}

/**
 * Messages node-postgres gives, without a code, when the server goes while a query waits or the pool
 * cannot get a connection in time.
 */
const UNREACHABLE_MESSAGES = [
  /^Connection terminated/,
  /^timeout exceeded when trying to connect/,
  /is not queryable/,
];

/** Whether `error` says the PostgreSQL store is away (it may be back later), not that the request was wrong. */
export function isStoreUnreachable(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (NETWORK_CODES.has(code) || unreachableState(code))) return true;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && UNREACHABLE_MESSAGES.some((pattern) => pattern.test(message));
}

/**
 * The store of record is away: named (`label` never holds a password), with why, and `consequence` (what
 * becomes of the request and of what was already done).
 */
export function storeUnavailable(label: string, cause: unknown, consequence: string): MetisError {
  const why = cause instanceof Error ? ` (${cause.message})` : '';
  return new MetisError(
    'METIS_ERR_STORE_UNAVAILABLE',
    `the PostgreSQL store ${label} is unreachable${why}: ${consequence}`,
    { cause },
  );
}

/**
 * A failure a read met, as the storage error a client is answered: the store of record away (503, named),
 * the working copy's disk full or failing (507/503, naming the file), or `error` unchanged.
 */
export function storageErrorOf(
  trace: { readonly upstream: StoreUpstream | null; readonly dbPath: string },
  error: unknown,
): unknown {
  if (trace.upstream !== null && isStoreUnreachable(error))
    return storeUnavailable(trace.upstream.label, error, 'try again once it is back');
  return asStorageError(error, trace.dbPath);
}
