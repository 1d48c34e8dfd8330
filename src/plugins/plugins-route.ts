import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendError, sendJson } from '../core/server/http-util.js';
import type { ExtraRoute } from '../core/server/server.js';
import type { PluginHost } from './plugin-host.js';

/** `GET /plugins`: every running plugin with its filter, path and delivered / failed / dropped counts. */
export function pluginsRoute(host: PluginHost): ExtraRoute {
  return async function pluginsRoute(request: IncomingMessage, response: ServerResponse, path: string) {
    if (path !== '/plugins') return false;
    if (request.method !== 'GET') {
      sendError(
        response,
        405,
        'METIS_ERR_METHOD_NOT_ALLOWED',
        `${request.method} is not allowed on /plugins`,
      );
      return true;
    }
    sendJson(response, 200, { plugins: host.list() });
    return true;
  };
}
