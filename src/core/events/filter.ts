import type { Actor, MetisEvent } from './envelope.js';

/** What a bus subscriber wants to receive (bus spec §3.1). `null` on a dimension means "all". */
export interface EventFilter {
  readonly session_ids: ReadonlySet<string> | null;
  readonly event_types: ReadonlySet<string> | null;
  readonly actors: ReadonlySet<Actor> | null;
}

/** The same filter as plain arrays, as it is written in config and carried in events. */
export interface EventFilterInput {
  readonly session_ids?: Iterable<string> | null;
  readonly event_types?: Iterable<string> | null;
  readonly actors?: Iterable<Actor> | null;
}

export const MATCH_ALL: EventFilter = Object.freeze({ session_ids: null, event_types: null, actors: null });

export function toEventFilter(input: EventFilterInput | undefined): EventFilter {
  if (!input) return MATCH_ALL;
  return {
    session_ids: input.session_ids ? new Set(input.session_ids) : null,
    event_types: input.event_types ? new Set(input.event_types) : null,
    actors: input.actors ? new Set(input.actors) : null,
  };
}

export function matchesFilter(filter: EventFilter, event: MetisEvent): boolean {
  return (
    (filter.session_ids === null || filter.session_ids.has(event.session_id)) &&
    (filter.event_types === null || filter.event_types.has(event.type)) &&
    (filter.actors === null || filter.actors.has(event.actor))
  );
}

/** JSON form of a filter (sorted, `null` for "all"), for `bus.subscriber_registered` and listings. */
export function describeFilter(filter: EventFilter): Record<string, string[] | null> {
  const list = (set: ReadonlySet<string> | null) => (set === null ? null : [...set].sort());
  return {
    session_ids: list(filter.session_ids),
    event_types: list(filter.event_types),
    actors: list(filter.actors),
  };
}
