import { loadConfig } from '../core/config/load-config.js';
import type { MetisConfig } from '../core/config/schema.js';
import { resolveDbPath } from '../core/store/paths.js';

export interface DatabaseOptions {
  db?: string;
  config?: string;
}

export const DB_HELP =
  'database file (default: storage.database of the config, else $METIS_HOME/metis.db, else ~/.metis/metis.db)';
export const CONFIG_HELP = 'config file (default: metis.config.* or .metisrc* found from here up)';

/**
 * The database a command works on, as `metis serve` picks it: `--db`, else the config's
 * `storage.database`, else the default file. Also returns the config, for the settings a command reads.
 */
export async function databaseFrom(
  options: DatabaseOptions,
): Promise<{ dbPath: string; config: MetisConfig }> {
  const { config } = await loadConfig({ explicitPath: options.config ?? null });
  return { dbPath: resolveDbPath(options.db ?? config.storage.database), config };
}
