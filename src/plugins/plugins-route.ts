import { z } from 'zod';
import { type JsonRoute, jsonRoute } from '../core/http/routes.js';
import type { PluginHost } from './plugin-host.js';

const count = z.int().nonnegative();

/** A running plugin (plugin-host.ts PluginStatus). */
const PluginAnswer = z.object({
  name: z.string(),
  specifier: z.string(),
  path: z.string(),
  index: count,
  fast_path: z.boolean(),
  demoted: z.boolean().describe('a fast-path plugin moved to a mailbox after overrunning its budget'),
  disabled: z.string().nullable().describe('why it no longer receives events, or null'),
  timeouts: count,
  filter: z
    .record(z.string(), z.array(z.string()).nullable())
    .describe('session_ids, event_types, actors: null for any'),
  delivered: count,
  failed: count,
  dropped: count,
  stats: z.record(z.string(), z.number()).nullable().describe("the plugin's own counters, if it keeps any"),
});

const PluginsAnswer = z.object({ plugins: z.array(PluginAnswer) });

/** `GET /plugins`: every running plugin with its filter, path and delivered / failed / dropped counts. */
export function pluginsRoute(host: PluginHost): JsonRoute {
  return jsonRoute(
    {
      method: 'GET',
      path: '/plugins',
      summary: 'The running plugins and their delivery counts',
      success: { status: 200, description: 'plugins', schema: PluginsAnswer },
      errors: [],
    },
    async () => [200, { plugins: host.list() }],
  );
}
