import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { isPostgresUrl } from '../core/store/store-copy.js';

/** `--store` of the store commands that read a PostgreSQL store. */
export const STORE_HELP =
  'a PostgreSQL store, postgres://user:pass@host:port/db, instead of a SQLite file (default: $METIS_STORE_URL, then store.url of the config, when --db is not given)';

/**
 * The PostgreSQL store a command works on, and how it was given: `--store`, else `$METIS_STORE_URL`,
 * else the config's `store.url`, the last two unless `--db` names a file; null for the SQLite store.
 * Anything but a postgres:// URL is refused naming where it came from (exit 2).
 */
export function pickStore(
  options: { readonly store?: string; readonly db?: string },
  configUrl: string | null,
): { readonly url: string; readonly setting: string } | null {
  const fromEnv = process.env.METIS_STORE_URL;
  const [url, setting] =
    options.store !== undefined
      ? [options.store, '--store']
      : options.db !== undefined
        ? [null, '']
        : fromEnv !== undefined && fromEnv !== ''
          ? [fromEnv, '$METIS_STORE_URL']
          : [configUrl, 'store.url'];
  if (url === null) return null;
  if (!isPostgresUrl(url))
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${setting}: must be a postgres:// URL${describeNonUrl(url)} (a SQLite file goes to --db)`,
    );
  return { url, setting };
}

/**
 * What was given instead, without the value: a string that is not a postgres:// URL may hold a password
 * in a form no URL parser finds (`user:secret@host`, libpq's `password=secret`).
 */
function describeNonUrl(value: string): string {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(value)?.[1];
  return scheme === undefined ? ', not a URL' : `, not a ${scheme}:// one`;
}

type StoreOptions = { readonly store?: string; readonly db?: string; readonly config?: string };

/** `pickStore` for the store commands, which read the config only when flags and environment are silent. */
export async function storeFrom(options: StoreOptions): Promise<{ url: string; setting: string } | null> {
  const silent = options.store === undefined && options.db === undefined && !process.env.METIS_STORE_URL;
  const configUrl = silent
    ? (await loadConfig({ explicitPath: options.config ?? null })).config.store.url
    : null;
  return pickStore(options, configUrl);
}

export async function storeUrlFrom(options: StoreOptions): Promise<string | null> {
  return (await storeFrom(options))?.url ?? null;
}
