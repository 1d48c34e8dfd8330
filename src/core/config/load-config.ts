import { dirname, resolve } from 'node:path';
import { cosmiconfig } from 'cosmiconfig';
import { MetisError } from '../errors.js';
import { type MetisConfig, MetisConfigSchema } from './schema.js';

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
  options: { explicitPath?: string | null; cwd?: string } = {},
): Promise<LoadedConfig> {
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
    found = options.explicitPath
      ? await explorer.load(resolve(options.explicitPath))
      : await explorer.search(options.cwd ?? process.cwd());
  } catch (error) {
    const message = (error as Error).message;
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new MetisError('METIS_ERR_CONFIG_INVALID', `config file not found: ${options.explicitPath}`);
    }
    throw new MetisError(
      'METIS_ERR_CONFIG_INVALID',
      `cannot read config ${options.explicitPath ?? ''}: ${message}`,
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
