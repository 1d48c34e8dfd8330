import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { MetisConfig } from '../core/config/schema.js';
import { DeadlineExceeded, withDeadline } from '../core/deadline.js';
import { MetisError } from '../core/errors.js';
import type { OptionsIssue, PluginDefinition } from './define-plugin.js';
import { BUILT_IN_PLUGINS, type ResolvedSpecifier, resolvePluginSpecifier } from './resolve-plugin.js';

/** Default of `plugin_timeouts.load_ms`. */
export const DEFAULT_LOAD_TIMEOUT_MS = 10_000;

export type PluginEntry = MetisConfig['plugins'][number];

/** Where a plugin was named: for error messages and listings. */
export interface PluginSource {
  /** As written in config: `"jsonl-sink"`, `"./my-plugin.mjs"`, `"@acme/metis-plugin"`. */
  readonly specifier: string;
  /** Position in the config's `plugins` array. */
  readonly index: number;
  /** The config file, or null when metis runs on its built-in defaults. */
  readonly configPath: string | null;
}

/** A plugin imported and checked, its options validated: ready for `startPlugins`. */
export interface LoadedPlugin extends PluginSource {
  /** The file imported, or `builtin:<name>`. */
  readonly path: string;
  readonly definition: PluginDefinition<unknown>;
  /** The output of the plugin's `optionsSchema` (defaults applied), or the raw options without one. */
  readonly options: unknown;
}

/** `plugin "./x.mjs" (plugins[2] in /home/me/metis.config.json)`: the prefix of every plugin error. */
export function describeSource(source: PluginSource): string {
  return `plugin "${source.specifier}" (plugins[${source.index}] in ${source.configPath ?? 'the built-in defaults'})`;
}

export function entryParts(entry: PluginEntry): { specifier: string; options: unknown } {
  return typeof entry === 'string'
    ? { specifier: entry, options: {} }
    : { specifier: entry[0], options: entry[1] };
}

/** Resolves every entry without importing anything (`metis plugins` without a server). */
export function resolvePluginEntries(
  entries: readonly PluginEntry[],
  configPath: string | null,
): (PluginSource & { resolved: ResolvedSpecifier; options: unknown })[] {
  const baseDir = configPath === null ? process.cwd() : dirname(configPath);
  return entries.map((entry, index) => {
    const { specifier, options } = entryParts(entry);
    return { specifier, index, configPath, options, resolved: resolvePluginSpecifier(specifier, baseDir) };
  });
}

/**
 * Resolves, imports and checks every plugin named in config, and validates its options with its own
 * schema, before anything starts. Like pino's transports, the module's `default` is unwrapped and a
 * wrong export is rejected with a precise message.
 * @throws MetisError METIS_ERR_PLUGIN_NOT_FOUND, METIS_ERR_PLUGIN_EXPORT, METIS_ERR_PLUGIN_OPTIONS or
 *   METIS_ERR_PLUGIN_START (the module threw while importing), each naming the plugin and config file.
 */
export async function loadPlugins(
  entries: readonly PluginEntry[],
  options: {
    configPath: string | null;
    /** Bound on importing one module (`plugin_timeouts.load_ms`, default 10 s). */
    loadTimeoutMs?: number;
  },
): Promise<LoadedPlugin[]> {
  const loadTimeoutMs = options.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS;
  const loaded: LoadedPlugin[] = [];
  for (const source of resolvePluginEntries(entries, options.configPath)) {
    const where = describeSource(source);
    const { resolved } = source;
    if (resolved.kind === 'missing') {
      throw new MetisError('METIS_ERR_PLUGIN_NOT_FOUND', `${where}: ${resolved.reason}`);
    }
    let module: unknown;
    try {
      // A module whose top-level await never settles would otherwise end the process with exit 13.
      module = await withDeadline(
        resolved.kind === 'builtin'
          ? BUILT_IN_PLUGINS[resolved.name]()
          : import(pathToFileURL(resolved.path).href),
        loadTimeoutMs,
        `importing ${resolved.path}`,
      );
    } catch (error) {
      if (error instanceof DeadlineExceeded) {
        throw new MetisError(
          'METIS_ERR_PLUGIN_START',
          `${where}: ${error.message} (a top-level await that never settles?); ` +
            'fix the module, raise plugin_timeouts.load_ms or remove the plugin from config',
          { cause: error },
        );
      }
      throw new MetisError(
        'METIS_ERR_PLUGIN_START',
        `${where}: importing ${resolved.path} failed: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const definition = checkDefinition(module, where);
    loaded.push({
      specifier: source.specifier,
      index: source.index,
      configPath: source.configPath,
      path: resolved.path,
      definition,
      options: validateOptions(definition, source.options, where),
    });
  }
  return loaded;
}

function describeValue(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'string') return `the string ${JSON.stringify(value)}`;
  return typeof value === 'object' ? 'an object' : `${typeof value} ${String(value)}`;
}

/** Unwraps `default` (twice for a transpiled CommonJS module) and checks `{ name, optionsSchema?, create }`. */
function checkDefinition(module: unknown, where: string): PluginDefinition<unknown> {
  const namespace = module as Record<string, unknown>;
  let exported = namespace.default;
  if (exported === undefined) {
    const names = Object.keys(namespace);
    throw new MetisError(
      'METIS_ERR_PLUGIN_EXPORT',
      `${where}: the module has no default export${names.length ? ` (it exports ${names.join(', ')})` : ''}; ` +
        'default-export { name, create }',
    );
  }
  const inner = exported as Record<string, unknown> | null;
  if (inner !== null && typeof inner === 'object' && !('create' in inner) && 'default' in inner) {
    exported = inner.default;
  }
  const fail = (problem: string) => new MetisError('METIS_ERR_PLUGIN_EXPORT', `${where}: ${problem}`);
  if (typeof exported === 'function') {
    throw fail(
      'the default export is a function; export an object instead: export default { name, create(options, ctx) }',
    );
  }
  if (exported === null || typeof exported !== 'object' || Array.isArray(exported)) {
    throw fail(`the default export must be an object { name, create }, got ${describeValue(exported)}`);
  }
  const candidate = exported as Record<string, unknown>;
  if (typeof candidate.name !== 'string' || candidate.name.trim() === '') {
    throw fail(
      `the default export's "name" must be a non-empty string, got ${describeValue(candidate.name)}`,
    );
  }
  if (typeof candidate.create !== 'function') {
    throw fail(`the default export's "create" must be a function, got ${describeValue(candidate.create)}`);
  }
  const schema = candidate.optionsSchema as { safeParse?: unknown } | undefined;
  if (schema !== undefined && (schema === null || typeof schema.safeParse !== 'function')) {
    throw fail(
      `the default export's "optionsSchema" must have a safeParse(value) method (a zod schema works), got ${describeValue(schema)}`,
    );
  }
  return candidate as unknown as PluginDefinition<unknown>;
}

function formatIssue(issue: OptionsIssue): string {
  const path = ['options', ...issue.path.map(String)].join('.');
  return `${path}: ${issue.message}`;
}

function validateOptions(definition: PluginDefinition<unknown>, raw: unknown, where: string): unknown {
  const schema = definition.optionsSchema;
  if (schema === undefined) return raw;
  let result: ReturnType<typeof schema.safeParse>;
  try {
    result = schema.safeParse(raw);
  } catch (error) {
    throw new MetisError(
      'METIS_ERR_PLUGIN_OPTIONS',
      `${where}: its optionsSchema threw: ${(error as Error).message}`,
    );
  }
  if (result.success) return result.data;
  const issues = result.error?.issues ?? [];
  const detail =
    issues.length > 0 ? issues.map(formatIssue).join('; ') : 'options: rejected by optionsSchema';
  throw new MetisError('METIS_ERR_PLUGIN_OPTIONS', `${where}: invalid options: ${detail}`);
}
