import { dirname, resolve } from 'node:path';
import { cosmiconfig } from 'cosmiconfig';
import { DeadlineExceeded, withDeadline } from '../deadline.js';
import { MetisError } from '../errors.js';
import { type MetisConfig, MetisConfigSchema } from './schema.js';

/** The environment variable that bounds loading the config (the config cannot bound itself). */
export const CONFIG_TIMEOUT_ENV = 'METIS_CONFIG_TIMEOUT_MS';
export const DEFAULT_CONFIG_TIMEOUT_MS = 10_000;

function configTimeoutFromEnv(): number {
  const raw = process.env[CONFIG_TIMEOUT_ENV];
  if (raw === undefined || raw === '') return DEFAULT_CONFIG_TIMEOUT_MS;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms <= 0) {
    throw new MetisError(
      'METIS_ERR_CONFIG_INVALID',
      `${CONFIG_TIMEOUT_ENV}: "${raw}" is not a positive number of milliseconds`,
    );
  }
  return ms;
}

export interface LoadedConfig {
  readonly config: MetisConfig;
  /** The file it came from, or null for the built-in defaults. */
  readonly filepath: string | null;
}

/**
 * Finds and validates the config: `--config F`, else `metis.config.{js,mjs,cjs,json,yaml}`,
 * `.metisrc*` or `package.json#metis` from `cwd` upward. An invalid file names the file, the path
 * inside it and the problem.
 */
export async function loadConfig(
  options: { explicitPath?: string | null; cwd?: string; timeoutMs?: number } = {},
): Promise<LoadedConfig> {
  const timeoutMs = options.timeoutMs ?? configTimeoutFromEnv();
  const explorer = cosmiconfig('metis', {
    searchStrategy: 'project',
    searchPlaces: [
      'package.json',
      '.metisrc',
      '.metisrc.json',
      '.metisrc.yaml',
      '.metisrc.yml',
      '.metisrc.js',
      '.metisrc.mjs',
      '.metisrc.cjs',
      'metis.config.json',
      'metis.config.yaml',
      'metis.config.yml',
      'metis.config.js',
      'metis.config.mjs',
      'metis.config.cjs',
    ],
  });
  let found: { config: unknown; filepath: string } | null;
  try {
    // A .js/.mjs config is imported: its top-level await could otherwise hang start-up for ever, or
    // end the process with exit 13 and no message (issue 12, observation 5).
    found = await withDeadline(
      options.explicitPath
        ? explorer.load(resolve(options.explicitPath))
        : explorer.search(options.cwd ?? process.cwd()),
      timeoutMs,
      'loading the config',
    );
  } catch (error) {
    if (error instanceof DeadlineExceeded) {
      const what = options.explicitPath
        ? resolve(options.explicitPath)
        : `the config found from ${options.cwd ?? process.cwd()}`;
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `loading ${what} did not finish within ${timeoutMs} ms (a top-level await that never settles?); ` +
          `fix the file, or raise ${CONFIG_TIMEOUT_ENV}`,
      );
    }
    const message = (error as Error).message;
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new MetisError('METIS_ERR_CONFIG_INVALID', `config file not found: ${options.explicitPath}`);
    }
    throw new MetisError(
      'METIS_ERR_CONFIG_INVALID',
      options.explicitPath
        ? `cannot read config ${options.explicitPath}: ${message}`
        : `cannot read config: ${message}`,
    );
  }
  if (found === null) return { config: MetisConfigSchema.parse({}), filepath: null };
  const result = MetisConfigSchema.safeParse(found.config ?? {});
  if (!result.success) {
    const problems = result.error.issues
      .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
      .join('; ');
    throw new MetisError('METIS_ERR_CONFIG_INVALID', `invalid config in ${found.filepath}: ${problems}`);
  }
  const config = result.data;
  // A relative database path is relative to the config file, not to wherever metis was started.
  if (config.storage.database !== null) {
    config.storage.database = resolve(dirname(found.filepath), config.storage.database);
  }
  return { config, filepath: found.filepath };
}
