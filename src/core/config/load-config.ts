import { readFile } from 'node:fs/promises';
import { basename, dirname, extname, resolve } from 'node:path';
import { defaultLoaders, type Loaders } from 'cosmiconfig';
import { DeadlineExceeded, withDeadline } from '../deadline.js';
import { MetisError } from '../errors.js';
import { configCandidates } from './config-search.js';
import { assertOwnConfigFile } from './config-trust.js';
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

/** What a config file held: `empty` for a blank file (or a module exporting nothing). */
type FileContent = { config: unknown; filepath: string; empty: boolean };

/**
 * Parses one file with cosmiconfig's own loaders (JSON, YAML, a JS import) and reads its result as its
 * `explorer.load` does. The explorer itself is not used: creating one (`cosmiconfig()`) looks for a
 * meta config in the process's current folder and imports a `.config/config.js` there, unchecked.
 * Null when the file holds no config: JSON `null`, a package.json without a `metis` key.
 */
async function parseConfigFile(filepath: string): Promise<FileContent | null> {
  const content = await readFile(filepath, 'utf8');
  if (content.trim() === '') return { config: undefined, filepath, empty: true };
  const extension = extname(filepath);
  const loader = (defaultLoaders as Loaders)[extension || 'noExt'];
  if (loader === undefined) throw new Error(`No loader specified for extension "${extension}"`);
  let loaded: unknown = await loader(filepath, content);
  if (basename(filepath, extension) === 'package')
    loaded = (loaded as { metis?: unknown } | null)?.metis ?? null;
  if (loaded === null) return null;
  return { config: loaded, filepath, empty: loaded === undefined };
}

/** Gone or unreadable between the search's stat and the read: cosmiconfig's search passed these over. */
const PASSED_OVER = new Set(['ENOENT', 'EISDIR', 'ENOTDIR', 'EACCES']);

/** `--config F`: judged like a found file (owner, mode, symlink), then loaded whatever it holds. */
async function loadExplicit(path: string): Promise<FileContent | null> {
  await assertOwnConfigFile(path);
  return parseConfigFile(path);
}

/**
 * The first candidate from `start` up that holds a config. Every candidate is judged before it is read,
 * but a package.json: it is judged once it is known to hold a `metis` key (see configCandidates).
 */
async function searchFrom(start: string): Promise<FileContent | null> {
  for await (const filepath of configCandidates(start)) {
    const found = await parseConfigFile(filepath).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== undefined && PASSED_OVER.has(error.code)) return null;
      throw error;
    });
    if (found === null || found.empty) continue;
    if (basename(filepath) === 'package.json') await assertOwnConfigFile(filepath);
    return found;
  }
  return null;
}

/**
 * Finds and validates the config: `--config F`, else `metis.config.{js,mjs,cjs,json,yaml}`,
 * `.metisrc*` or `package.json#metis` from `cwd` upward (through folders only the user can write; see
 * config-search.ts). An invalid file names the file, the path inside it and the problem; a file the user
 * does not own, or others can write, is refused and named (issue 34, observation 1).
 */
export async function loadConfig(
  options: { explicitPath?: string | null; cwd?: string; timeoutMs?: number } = {},
): Promise<LoadedConfig> {
  const timeoutMs = options.timeoutMs ?? configTimeoutFromEnv();
  let found: FileContent | null;
  try {
    // A .js/.mjs config is imported: its top-level await could otherwise hang start-up for ever, or
    // end the process with exit 13 and no message (issue 12, observation 5).
    found = await withDeadline(
      options.explicitPath
        ? loadExplicit(resolve(options.explicitPath))
        : searchFrom(resolve(options.cwd ?? process.cwd())),
      timeoutMs,
      'loading the config',
    );
  } catch (error) {
    if (error instanceof MetisError) throw error;
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
    if (options.explicitPath && (error as NodeJS.ErrnoException).code === 'ENOENT') {
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
