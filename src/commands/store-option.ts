import { MetisError } from '../core/errors.js';
import { isPostgresUrl, redactUrl } from '../core/store/store-copy.js';

/** `--store` of the store commands that read a PostgreSQL store. */
export const STORE_HELP =
  'a PostgreSQL store, postgres://user:pass@host:port/db, instead of a SQLite file (default: $METIS_STORE_URL when --db is not given)';

/**
 * The PostgreSQL store a command should read: `--store`, else `$METIS_STORE_URL` unless `--db` names a
 * file; null for the SQLite store. Anything but a postgres:// URL is refused naming the flag.
 */
export function storeUrlFrom(options: { readonly store?: string; readonly db?: string }): string | null {
  const fromEnv = options.db === undefined ? process.env.METIS_STORE_URL : undefined;
  const url = options.store ?? (fromEnv === '' ? undefined : fromEnv);
  if (url === undefined) return null;
  if (!isPostgresUrl(url))
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${options.store === undefined ? '$METIS_STORE_URL' : '--store'}: must be a postgres:// URL, not ${JSON.stringify(redactUrl(url))} (a SQLite file goes to --db)`,
    );
  return url;
}
