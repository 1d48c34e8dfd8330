import { MetisError } from '../core/errors.js';
import { CATALOG } from '../core/events/catalog/index.js';
import { ACTORS } from '../core/events/envelope.js';
import type { PluginInstance } from './define-plugin.js';

/**
 * Checks what a plugin's `create()` returned, so a wrong shape stops start-up with a message that says
 * what is wrong instead of failing later inside the bus.
 * @throws MetisError METIS_ERR_PLUGIN_EXPORT naming the plugin (`where`) and the problem.
 */
export function checkInstance(value: unknown, where: string): PluginInstance {
  const fail = (problem: string) =>
    new MetisError(
      'METIS_ERR_PLUGIN_EXPORT',
      `${where}: create() must return { handle(event), filter?, fastPath?, start?, stop? }; ${problem}`,
    );
  if (value === null || typeof value !== 'object')
    throw fail(`got ${value === null ? 'null' : typeof value}`);
  const instance = value as Record<string, unknown>;
  if (typeof instance.handle !== 'function') throw fail('"handle" is not a function');
  for (const key of ['handleBatch', 'start', 'stop', 'stats']) {
    if (instance[key] !== undefined && typeof instance[key] !== 'function') {
      throw fail(`"${key}" is not a function`);
    }
  }
  if (instance.fastPath !== undefined && typeof instance.fastPath !== 'boolean') {
    throw fail('"fastPath" is not a boolean');
  }
  checkFilter(instance.filter, fail);
  return value as PluginInstance;
}

function checkFilter(filter: unknown, fail: (problem: string) => Error): void {
  if (filter === undefined || filter === null) return;
  if (typeof filter !== 'object' || Array.isArray(filter)) throw fail('"filter" is not an object');
  const known: Record<string, (value: string) => boolean> = {
    session_ids: () => true,
    event_types: (type) => CATALOG.has(type),
    actors: (actor) => (ACTORS as readonly string[]).includes(actor),
  };
  for (const [key, list] of Object.entries(filter)) {
    const isKnown = known[key];
    if (isKnown === undefined) {
      throw fail(`filter.${key} is not one of session_ids, event_types, actors`);
    }
    if (list === null || list === undefined) continue;
    if (!Array.isArray(list) || list.some((item) => typeof item !== 'string')) {
      throw fail(`filter.${key} must be an array of strings or null`);
    }
    const unknown = (list as string[]).find((item) => !isKnown(item));
    if (unknown !== undefined) throw fail(`filter.${key} has an unknown value "${unknown}"`);
  }
}
