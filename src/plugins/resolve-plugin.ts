import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The plugins shipped with metis, imported only when a config names them. */
export const BUILT_IN_PLUGINS = {
  'jsonl-sink': () => import('./jsonl-sink.js'),
  webhook: () => import('./webhook.js'),
  otel: () => import('./otel.js'),
} as const satisfies Record<string, () => Promise<unknown>>;

export type BuiltInName = keyof typeof BUILT_IN_PLUGINS;

export type ResolvedSpecifier =
  | { readonly kind: 'builtin'; readonly name: BuiltInName; readonly path: string }
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'missing'; readonly reason: string };

export function isBuiltIn(specifier: string): specifier is BuiltInName {
  return Object.hasOwn(BUILT_IN_PLUGINS, specifier);
}

function isPathLike(specifier: string): boolean {
  return /^(\.{1,2}[\\/]|[\\/]|file:|[A-Za-z]:[\\/])/.test(specifier);
}

/**
 * Where a plugin named in config lives: a built-in name, a path (relative to `baseDir`, the config
 * file's folder) or a package name found from `baseDir` upward, as pino resolves transports.
 * Never throws: an unresolvable name comes back as `missing` with the reason.
 */
export function resolvePluginSpecifier(specifier: string, baseDir: string): ResolvedSpecifier {
  if (isBuiltIn(specifier)) return { kind: 'builtin', name: specifier, path: `builtin:${specifier}` };
  if (isPathLike(specifier)) {
    const path = specifier.startsWith('file:') ? fileURLToPath(specifier) : resolve(baseDir, specifier);
    return existsSync(path) ? { kind: 'file', path } : { kind: 'missing', reason: `no file at ${path}` };
  }
  const require = createRequire(join(baseDir, 'noop.js'));
  try {
    return { kind: 'file', path: require.resolve(specifier) };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // An ESM-only package exports no "require" condition: read its "exports" ourselves.
    const esm = code === 'ERR_PACKAGE_PATH_NOT_EXPORTED' ? esmEntry(specifier, require) : null;
    if (esm !== null) return { kind: 'file', path: esm };
    return {
      kind: 'missing',
      reason: `no installed package "${specifier}" (searched node_modules from ${baseDir} upward)`,
    };
  }
}

/** Splits `@scope/pkg/sub` into the package name and the export subpath `./sub`. */
function splitPackage(specifier: string): { name: string; subpath: string } {
  const parts = specifier.split('/');
  const length = specifier.startsWith('@') ? 2 : 1;
  const rest = parts.slice(length).join('/');
  return { name: parts.slice(0, length).join('/'), subpath: rest ? `./${rest}` : '.' };
}

function pickCondition(target: unknown): string | null {
  if (typeof target === 'string') return target;
  if (Array.isArray(target)) return pickCondition(target[0]);
  if (target === null || typeof target !== 'object') return null;
  const conditions = target as Record<string, unknown>;
  for (const key of ['import', 'node', 'default']) {
    if (key in conditions) return pickCondition(conditions[key]);
  }
  return null;
}

function esmEntry(specifier: string, require: NodeJS.Require): string | null {
  const { name, subpath } = splitPackage(specifier);
  for (const dir of require.resolve.paths(specifier) ?? []) {
    const manifest = join(dir, name, 'package.json');
    if (!existsSync(manifest)) continue;
    const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: unknown };
    const keyed =
      exports !== null && typeof exports === 'object' && Object.keys(exports).some((k) => k.startsWith('.'));
    const target = keyed
      ? (exports as Record<string, unknown>)[subpath]
      : subpath === '.'
        ? exports
        : undefined;
    const entry = pickCondition(target);
    if (entry === null || isAbsolute(entry)) return null;
    return resolve(dirname(manifest), entry);
  }
  return null;
}
