import type { EventBus } from '../bus/event-bus.js';
import { MetisError } from '../errors.js';
import type { MetisEvent } from '../events/envelope.js';
import type { TraceLookups } from '../store/trace-lookups.js';

export type Rating = 'thumbs_up' | 'thumbs_down';

export interface ExplicitFeedback {
  readonly sessionId: string;
  readonly rating: Rating;
  /** The turn rated; null rates the session. */
  readonly turnId: string | null;
  readonly comment: string | null;
}

/**
 * Records the user's rating of a turn or of a session as `feedback.explicit` (bus §6.9). Its parent is
 * what was rated: the turn's end, or `session.ended` (null while the session goes on). A turn is rated
 * once it has ended; a comment is the user's own words, so the event is recorded `private` then, not at
 * the catalog's `aggregatable` (docs/decisions.md "Explicit feedback").
 * @throws MetisError METIS_ERR_TURN_NOT_FOUND for a turn the session never had,
 *   METIS_ERR_TURN_IN_FLIGHT for one still running.
 */
export async function recordExplicitFeedback(
  bus: EventBus,
  lookups: TraceLookups,
  feedback: ExplicitFeedback,
): Promise<MetisEvent> {
  const { sessionId, turnId } = feedback;
  let parent: string | null;
  if (turnId !== null) {
    if ((await lookups.turnStartedId(sessionId, turnId)) === null)
      throw new MetisError(
        'METIS_ERR_TURN_NOT_FOUND',
        `turn ${turnId} is not a turn of session ${sessionId}`,
      );
    parent = await lookups.turnEndId(sessionId, turnId);
    if (parent === null)
      throw new MetisError(
        'METIS_ERR_TURN_IN_FLIGHT',
        `turn ${turnId} is still running; rate it once it has ended`,
      );
  } else {
    parent = await lookups.sessionEndedId(sessionId);
  }
  return bus.emit({
    type: 'feedback.explicit',
    session_id: sessionId,
    turn_id: turnId,
    parent_event_id: parent,
    actor: 'user',
    payload: {
      scope: turnId === null ? 'session' : 'turn',
      rating: feedback.rating,
      comment: feedback.comment,
      subject_turn_id: turnId,
      subject_session_id: sessionId,
    },
    ...(feedback.comment === null ? {} : { sensitivity: 'private' as const }),
  })!;
}
