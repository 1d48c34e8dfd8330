import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MetisError } from '../errors.js';

/** The dashboard's folder: the built one by default, a folder of the user's, or none. */
export function dashboardFolder(setting: boolean | string): string | null {
  if (setting === false) return null;
  if (typeof setting === 'string') {
    if (!existsSync(join(setting, 'index.html')))
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `server.dashboard: ${setting} has no index.html (a dashboard build folder, or true, or false)`,
      );
    return setting;
  }
  // dist/dashboard beside this file's package (src/ and dist/ alike are two levels below the root).
  const built = fileURLToPath(new URL('../../../dist/dashboard', import.meta.url));
  return existsSync(join(built, 'index.html')) ? built : null;
}
