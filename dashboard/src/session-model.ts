import { type ConversationState, type Frame, initialState, reduce } from '../../src/client/browser.js';
import { api } from './api.js';
import type { StoredEvent } from './api-types.js';

export interface TurnFigures {
  input_tokens: number;
  output_tokens: number;
  wall_time_seconds: number | null;
}

/** What the session page draws: the reducer's conversation plus each ended turn's token counts. */
export interface SessionModel {
  readonly state: ConversationState;
  /** Token counts of ended turns (the reducer keeps their cost, not their tokens). */
  readonly figures: Readonly<Record<string, TurnFigures>>;
}

export const EMPTY_MODEL: SessionModel = { state: initialState, figures: {} };

/**
 * One frame into the model: the live stream's frames and the stored events of a reload both go
 * through here, so a page reloaded shows what the page that watched it live showed.
 */
export function step(model: SessionModel, frame: Frame): SessionModel {
  const state = reduce(model.state, frame);
  if (state === model.state) return model;
  if (frame.type !== 'event' || frame.event.type !== 'turn.completed' || frame.event.turn_id === null)
    return { ...model, state };
  const payload = frame.event.payload;
  return {
    state,
    figures: {
      ...model.figures,
      [frame.event.turn_id]: {
        input_tokens: payload.total_input_tokens,
        output_tokens: payload.total_output_tokens,
        wall_time_seconds: payload.wall_time_seconds,
      },
    },
  };
}

const PAGE = 5000;

/**
 * The model as of a snapshot: the session's stored events up to `snapshot_at_event_id` (its tools'
 * statuses and durations, its turns' routes, failures, cost and tokens: what the snapshot's messages
 * do not say) folded through `step`, then the snapshot itself (its messages win). Events after it
 * come on the stream and go through `step` as well.
 */
export async function fromSnapshot(sessionId: string, snapshot: Frame): Promise<SessionModel> {
  const upTo = snapshot.snapshot_at_event_id as string | null | undefined;
  let model = EMPTY_MODEL;
  let after: string | null = null;
  while (upTo) {
    const query: string = `limit=${PAGE}${after === null ? '' : `&after=${encodeURIComponent(after)}`}`;
    const page: { events: StoredEvent[]; has_more: boolean } = await api(
      'GET',
      `/sessions/${encodeURIComponent(sessionId)}/trace?${query}`,
    );
    for (const event of page.events) {
      if (event.id > upTo) break;
      model = step(model, { type: 'event', event });
    }
    const last = page.events.at(-1);
    if (!page.has_more || last === undefined || last.id >= upTo) break;
    after = last.id;
  }
  // The snapshot's cursor replaces the history's; the messages are the snapshot's.
  return step({ ...model, state: { ...model.state, lastEventId: null } }, snapshot);
}
