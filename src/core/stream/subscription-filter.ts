import { CATALOG } from '../events/catalog/index.js';
import type { Actor, MetisEvent } from '../events/envelope.js';
import { isPresetName, PRESETS } from '../events/presets.js';
import { STREAMING } from '../events/streaming.js';
import type { SubscribeFrame } from './client-frames.js';
import { isQuestionToUser } from './stream-hub.js';

/** A subscribe filter after presets are expanded (streaming §3.2, §3.3). */
export interface ResolvedFilter {
  readonly event_types: readonly string[] | null;
  readonly actors: readonly Actor[] | null;
  readonly include_worker_sessions: boolean;
  /** The bus spec's session filter: null is the attached session (and its workers when included). */
  readonly session_ids: readonly string[] | null;
}

export type FilterResolution = { ok: true; filter: ResolvedFilter } | { ok: false; unknown: string[] };

/** Expands a preset; rejects types in neither family (§9.3: strict, so nothing is silently dropped). */
export function resolveFilter(filter: SubscribeFrame['filter']): FilterResolution {
  if (isPresetName(filter)) {
    return {
      ok: true,
      filter: {
        event_types: [...PRESETS[filter]],
        actors: null,
        include_worker_sessions: false,
        session_ids: null,
      },
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
      session_ids: filter.session_ids ? [...new Set(filter.session_ids)] : null,
    },
  };
}

/**
 * Why `session_ids` names a session this stream cannot carry, or null. A per-session stream carries the
 * attached session and, with `include_worker_sessions`, its workers (streaming §2.2 item 2, §7): the list
 * may only narrow that set, never widen it to another session.
 */
export function sessionIdsProblem(
  filter: ResolvedFilter,
  attached: string,
  workers: readonly string[],
): string | null {
  if (filter.session_ids === null) return null;
  const workerSet = new Set(workers);
  for (const id of filter.session_ids) {
    if (id === attached) continue;
    if (!workerSet.has(id))
      return `session_ids: ${id} is neither this stream's session (${attached}) nor one of its workers`;
    if (!filter.include_worker_sessions)
      return `session_ids: ${id} is a worker session; set include_worker_sessions: true to receive it`;
  }
  return null;
}

/**
 * A compiled filter for the per-event check on the live path. `attached` is the stream's session:
 * while it is in `session_ids`, its workers' questions to the user still reach it, as in the default
 * view (docs/decisions.md "Delegated confirmations").
 */
export function compileFilter(filter: ResolvedFilter, attached?: string): (event: MetisEvent) => boolean {
  const types = filter.event_types ? new Set(filter.event_types) : null;
  const actors = filter.actors ? new Set<string>(filter.actors) : null;
  const sessions = filter.session_ids ? new Set(filter.session_ids) : null;
  const questions = sessions !== null && attached !== undefined && sessions.has(attached);
  return (event) =>
    (types === null || types.has(event.type)) &&
    (actors === null || actors.has(event.actor)) &&
    (sessions === null || sessions.has(event.session_id) || (questions && isQuestionToUser(event)));
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
