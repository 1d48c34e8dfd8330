import { loadConfig } from '../core/config/load-config.js';
import type { MetisConfig } from '../core/config/schema.js';
import { type ServerTarget, serverUrl, tokenFrom } from './api-request.js';

export interface TargetOptions {
  url?: string;
  token?: string;
  /** `--config <file>`, else the config found from the current folder up. */
  config?: string;
}

/** The URL a client reaches a server on that binds what this config says (a wildcard bind: loopback). */
export function configuredUrl(config: MetisConfig): string {
  const host = ['0.0.0.0', '::', ''].includes(config.server.host) ? '127.0.0.1' : config.server.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.server.port}`;
}

/**
 * Where a client command finds the server, as `metis serve` run from the same folder would listen:
 * `--url`, else $METIS_URL, else the host and port of the config (`--config`, or the one found from
 * here up), else http://127.0.0.1:8421. The token: `--token`, else $METIS_TOKEN, else the config's
 * `server.bearer_token`, else the token file of $METIS_HOME. The config is read only when one of them
 * is not given otherwise; a broken one is an error that names it, and so is one another account could
 * have written (loadConfig refuses it): the token file's token never goes where such a file points.
 */
export async function serverTarget(
  options: TargetOptions,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ServerTarget> {
  const urlGiven = options.url !== undefined || Boolean(env.METIS_URL);
  const tokenGiven = Boolean(options.token || env.METIS_TOKEN);
  const config =
    urlGiven && tokenGiven && options.config === undefined
      ? null
      : (await loadConfig({ explicitPath: options.config ?? null })).config;
  const url = serverUrl(options.url, config === null ? undefined : configuredUrl(config));
  const token = tokenGiven
    ? tokenFrom(options, env)
    : (config?.server.bearer_token ?? tokenFrom(options, env));
  return { url, token };
}
