import { CATALOG } from '../events/catalog/index.js';
import type { Actor, MetisEvent } from '../events/envelope.js';
import { isPresetName, PRESETS } from '../events/presets.js';
import { STREAMING } from '../events/streaming.js';
import type { SubscribeFrame } from './frames.js';

/** A subscribe filter after presets are expanded (streaming §3.2, §3.3). */
export interface ResolvedFilter {
  readonly event_types: readonly string[] | null;
  readonly actors: readonly Actor[] | null;
  readonly include_worker_sessions: boolean;
}

export type FilterResolution = { ok: true; filter: ResolvedFilter } | { ok: false; unknown: string[] };

/** Expands a preset; rejects types in neither family (§9.3: strict, so nothing is silently dropped). */
export function resolveFilter(filter: SubscribeFrame['filter']): FilterResolution {
  if (isPresetName(filter)) {
    return {
      ok: true,
      filter: { event_types: [...PRESETS[filter]], actors: null, include_worker_sessions: false },
    };
  }
  const unknown = (filter.event_types ?? []).filter((type) => !CATALOG.has(type) && !STREAMING.has(type));
  if (unknown.length > 0) return { ok: false, unknown };
  return {
    ok: true,
    filter: {
      event_types: filter.event_types ? [...new Set(filter.event_types)] : null,
      actors: filter.actors ? [...new Set(filter.actors)] : null,
      include_worker_sessions: filter.include_worker_sessions,
    },
  };
}

/** A compiled filter for the per-event check on the live path. */
export function compileFilter(filter: ResolvedFilter): (event: MetisEvent) => boolean {
  const types = filter.event_types ? new Set(filter.event_types) : null;
  const actors = filter.actors ? new Set<string>(filter.actors) : null;
  return (event) => (types === null || types.has(event.type)) && (actors === null || actors.has(event.actor));
}

/** Whether a filter lets streaming-only events through (they live in memory, not in the store). */
export function wantsStreaming(filter: ResolvedFilter): boolean {
  const entries = [...STREAMING.values()].filter(
    (entry) => filter.event_types === null || filter.event_types.includes(entry.type),
  );
  return entries.some(
    (entry) => filter.actors === null || entry.actors.some((actor) => filter.actors!.includes(actor)),
  );
}
