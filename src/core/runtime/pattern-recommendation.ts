import type { EventBus } from '../bus/event-bus.js';
import { MetisError } from '../errors.js';
import type { LiveSession } from './live-sessions.js';
import type { ModelRegistry } from './models/model-registry.js';
import { fingerprintOf } from './patterns/fingerprint.js';
import type { PatternStore } from './patterns/pattern-store.js';
import { redirectTurn } from './turn-state.js';

/**
 * What the user can do with a pattern recommendation the routing chain deferred behind an earlier
 * policy (bus §6.5b): apply it to the running turn, or dismiss it. It stays pending until one of them,
 * or until the session's next turn starts.
 */

/**
 * Applies the pattern recommendation deferred in the running turn (bus §6.5b): the call in flight is
 * cut, then the turn emits `route.overridden`, parented to its `route.decided` (which stays as it was),
 * and goes on with the recommended model.
 * @throws MetisError METIS_ERR_NO_RECOMMENDATION when none is pending, or its turn is ending.
 */
export function applyRecommendation(
  session: LiveSession,
  models: ModelRegistry,
): {
  turn_id: string;
  original_chosen_model: string;
  new_chosen_model: string;
} {
  const pending = pendingRecommendation(session);
  const turn = session.turn;
  if (turn === null || turn.state.turnId !== pending.turnId || turn.state.ending || turn.state.cancelReason)
    throw new MetisError(
      'METIS_ERR_NO_RECOMMENDATION',
      `turn ${pending.turnId} of session ${session.id} has ended: an override re-dispatches a running turn; dismiss the recommendation instead, or send the message again with --model ${pending.model}`,
    );
  const resolution = models.resolve(pending.model);
  if (!resolution.ok)
    throw new MetisError(
      'METIS_ERR_NO_RECOMMENDATION',
      `the recommended model ${pending.model} cannot serve now (${resolution.failure}${resolution.detail ? `: ${resolution.detail}` : ''})`,
    );
  // route.overridden comes from the turn, once the call in flight is closed (TurnRunner).
  redirectTurn(turn.state, {
    model: pending.model,
    adapter: resolution.adapter,
    routeDecidedId: pending.routeDecidedId,
    payload: {
      original_chosen_model: pending.chosenModel,
      new_chosen_model: pending.model,
      deferred_policy: 'pattern',
      rule_name: pending.ruleName,
      pattern_confidence: pending.confidence,
    },
  });
  session.recommendation = null;
  return {
    turn_id: pending.turnId,
    original_chosen_model: pending.chosenModel,
    new_chosen_model: pending.model,
  };
}

/**
 * Dismisses the pending pattern recommendation (`pattern.override_dismissed`): the turn keeps its
 * model. Possible until the session's next turn starts.
 * @throws MetisError METIS_ERR_NO_RECOMMENDATION when none is pending.
 */
export function dismissRecommendation(
  session: LiveSession,
  bus: EventBus,
): {
  turn_id: string;
  chosen_model: string;
  dismissed_pattern_model: string;
} {
  const pending = pendingRecommendation(session);
  const running = session.turn?.state.turnId === pending.turnId && session.turn.state.ending !== true;
  bus.emit({
    type: 'pattern.override_dismissed',
    session_id: session.id,
    // Outside the turn once it has ended: nothing may follow its terminal event in it.
    turn_id: running ? pending.turnId : null,
    parent_event_id: pending.routeDecidedId,
    actor: 'user',
    payload: {
      chosen_model: pending.chosenModel,
      dismissed_pattern_model: pending.model,
      rule_name: pending.ruleName,
      pattern_confidence: pending.confidence,
    },
  });
  session.recommendation = null;
  return {
    turn_id: pending.turnId,
    chosen_model: pending.chosenModel,
    dismissed_pattern_model: pending.model,
  };
}

/** The pattern store's advice for a turn of this session (workers are routed by their tier). */
export function adviserFor(patterns: PatternStore | null, session: LiveSession) {
  if (patterns === null || session.isWorker) return undefined;
  return (message: string) => (otherwise: string, toolsInHistory: boolean) =>
    patterns.advise(fingerprintOf(message, toolsInHistory, session.workspaceHash).key, otherwise);
}

function pendingRecommendation(session: LiveSession): NonNullable<LiveSession['recommendation']> {
  if (session.recommendation === null)
    throw new MetisError(
      'METIS_ERR_NO_RECOMMENDATION',
      `session ${session.id} has no pattern recommendation pending: its latest route.decided deferred none, or it was applied or dismissed`,
    );
  return session.recommendation;
}
