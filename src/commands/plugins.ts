import { dirname } from 'node:path';
import { loadConfig } from '../core/config/load-config.js';
import type { MetisConfig } from '../core/config/schema.js';
import { MetisError } from '../core/errors.js';
import { describeFilter as describeEventFilter, toEventFilter } from '../core/events/filter.js';
import { silentLogger } from '../core/logger.js';
import { resolveDbPath } from '../core/store/paths.js';
import type { TraceQuery } from '../plugins/define-plugin.js';
import type { PluginStatus } from '../plugins/plugin-host.js';
import { serverUrl, tokenFrom, unauthorized } from './api-request.js';
import { probe } from './probe.js';
import { configuredUrl } from './server-target.js';
import { table } from './text-table.js';

export interface PluginsOptions {
  json?: boolean;
  config?: string;
  url?: string;
  token?: string;
}

/** A plugin as config names it, when no server answers. */
interface ConfiguredPlugin {
  readonly name: string;
  readonly specifier: string;
  readonly path: string;
  readonly index: number;
  readonly fast_path: boolean;
  readonly filter: Record<string, string[] | null>;
}

/**
 * The running server's plugins, or null when nothing answers there (or it has no `/plugins`).
 * @throws MetisError when a server answers but refuses the token: that is not "no server"
 */
async function fetchRunning(url: string, token: string | null): Promise<PluginStatus[] | null> {
  let response: Response;
  try {
    response = await probe(`${url}/plugins`, token ? { authorization: `Bearer ${token}` } : {});
  } catch {
    return null;
  }
  if (response.status === 401) {
    const body = (await response.json().catch(() => ({}))) as { error?: { message?: string } };
    throw unauthorized(url, token ?? undefined, body.error?.message ?? 'unauthorized');
  }
  try {
    if (!response.ok) return null;
    const body = (await response.json()) as { plugins?: PluginStatus[] };
    return Array.isArray(body.plugins) ? body.plugins : null;
  } catch {
    return null;
  }
}

const OFFLINE_STORE: TraceQuery = new Proxy({} as TraceQuery, {
  get: () => () => {
    throw new Error('the trace store is not open: `metis plugins` only lists plugins');
  },
});

/**
 * The plugins config names, checked as `metis serve` would (module, export, options) and created, not
 * started, to learn each one's filter and dispatch path.
 */
export async function configured(
  config: MetisConfig,
  configPath: string | null,
): Promise<ConfiguredPlugin[]> {
  const { loadPlugins } = await import('../plugins/load-plugins.js');
  const { createInstance } = await import('../plugins/plugin-host.js');
  const dataDir = dirname(resolveDbPath(config.storage.database));
  const logger = silentLogger();
  const listed: ConfiguredPlugin[] = [];
  for (const plugin of await loadPlugins(config.plugins, { configPath })) {
    const { instance } = await createInstance(plugin, { logger, store: OFFLINE_STORE, dataDir });
    listed.push({
      name: plugin.definition.name,
      specifier: plugin.specifier,
      path: plugin.path,
      index: plugin.index,
      fast_path: instance.fastPath === true,
      filter: describeEventFilter(toEventFilter(instance.filter)),
    });
  }
  return listed;
}

function describeFilter(filter: Record<string, unknown>): string {
  const parts = Object.entries(filter)
    .filter(([, v]) => Array.isArray(v))
    .map(([k, v]) => {
      const list = v as string[];
      const shown = list.length > 3 ? [...list.slice(0, 3), `+${list.length - 3} more`] : list;
      return `${k}=${shown.join(',')}`;
    });
  return parts.length > 0 ? parts.join(' ') : 'all events';
}

/**
 * `metis plugins`: each plugin with its filter and path; with a server running at `--url` (default
 * `$METIS_URL`, else the configured host and port) also its delivered / failed / dropped counts.
 */
export async function pluginsCommand(options: PluginsOptions): Promise<void> {
  const { config, filepath } = await loadConfig({ explicitPath: options.config ?? null });
  const url = serverUrl(options.url, configuredUrl(config));
  const token = options.token || config.server.bearer_token || tokenFrom({}) || null;
  const running = await fetchRunning(url, token);
  if (running === null && options.url !== undefined) {
    // Asked about a server by name: listing the config's plugins instead would answer another question.
    throw new MetisError('METIS_ERR_SERVER_UNREACHABLE', `no metis server answered GET ${url}/plugins`);
  }
  if (running !== null) {
    if (options.json) {
      console.log(JSON.stringify({ source: 'server', url, config: filepath, plugins: running }, null, 2));
      return;
    }
    console.log(`plugins of the server at ${url}:`);
    if (running.length === 0) console.log('  (none)');
    else {
      const rows = running.map((p) => [
        p.name,
        p.fast_path ? 'fast' : p.demoted ? 'batch (demoted)' : 'batch',
        describeFilter(p.filter),
        String(p.delivered),
        String(p.failed),
        String(p.dropped),
        p.path,
      ]);
      console.log(
        table([['name', 'dispatch', 'filter', 'delivered', 'failed', 'dropped', 'module'], ...rows]),
      );
    }
    return;
  }
  const plugins = await configured(config, filepath);
  if (options.json) {
    console.log(JSON.stringify({ source: 'config', url: null, config: filepath, plugins }, null, 2));
    return;
  }
  console.log(`plugins named in ${filepath ?? 'the built-in defaults'} (no server at ${url}, so no counts):`);
  if (plugins.length === 0) console.log('  (none)');
  else {
    const rows = plugins.map((p) => [
      p.name,
      p.fast_path ? 'fast' : 'batch',
      describeFilter(p.filter),
      p.path,
    ]);
    console.log(table([['name', 'dispatch', 'filter', 'module'], ...rows]));
  }
}
