import { z } from 'zod';
import { CATALOG } from '../core/events/catalog/index.js';
import { ActorSchema } from '../core/events/envelope.js';
import type { PluginFilter } from './define-plugin.js';

const eventType = z.string().refine((type) => CATALOG.has(type), {
  error: (issue) => `unknown event type "${String(issue.input)}" (run \`metis catalog\`)`,
});

/** The filter options every built-in plugin takes; null means "all" (bus spec §3.1 EventFilter). */
export const filterOptions = {
  session_ids: z.array(z.string().min(1)).nullable().default(null),
  event_types: z.array(eventType).nullable().default(null),
  actors: z.array(ActorSchema).nullable().default(null),
};

export function filterFrom(options: {
  session_ids: string[] | null;
  event_types: string[] | null;
  actors: PluginFilter['actors'];
}): PluginFilter {
  return { session_ids: options.session_ids, event_types: options.event_types, actors: options.actors };
}
