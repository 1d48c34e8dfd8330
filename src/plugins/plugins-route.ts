import { type JsonRoute, jsonRoute } from '../core/http/routes.js';
import type { PluginHost } from './plugin-host.js';

/** `GET /plugins`: every running plugin with its filter, path and delivered / failed / dropped counts. */
export function pluginsRoute(host: PluginHost): JsonRoute {
  return jsonRoute(
    {
      method: 'GET',
      path: '/plugins',
      summary: 'The running plugins and their delivery counts',
      success: { status: 200, description: 'plugins' },
      errors: [],
    },
    async () => [200, { plugins: host.list() }],
  );
}
