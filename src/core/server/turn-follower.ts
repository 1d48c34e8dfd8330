import type { ServerResponse } from 'node:http';
import type { MetisEvent } from '../events/envelope.js';
import type { Runtime } from '../runtime/runtime.js';
import { isQuestionToUser, type StreamHub, type StreamTarget } from './stream-hub.js';

export interface FollowedTurn {
  readonly sessionId: string;
  readonly turnId: string;
  /** Resolves once the turn's terminal event has been handed to `onEvent`. */
  readonly ended: Promise<MetisEvent>;
}

const TURN_ENDS = new Set(['turn.completed', 'turn.cancelled']);

/**
 * Runs one turn for a request that answers with the turn's own stream (AI SDK, AG-UI): listens to the
 * session on the hub before the turn starts, so nothing of it is missed, hands each of its events (and
 * the confirmations of its workers, questions to the user) to `onEvent` in order, and cancels the turn
 * with `client_disconnect` when the response closes before the turn ended. `onStart` comes first, with
 * the turn id.
 */
export function followTurn(
  runtime: Runtime,
  hub: StreamHub,
  sessionId: string,
  message: string,
  response: ServerResponse,
  onEvent: (event: MetisEvent) => void,
  onStart: (turnId: string) => void = () => undefined,
): FollowedTurn {
  let turnId: string | null = null;
  let done = false;
  const early: MetisEvent[] = [];
  let resolveEnded!: (event: MetisEvent) => void;
  const ended = new Promise<MetisEvent>((resolve) => (resolveEnded = resolve));
  const handle = (event: MetisEvent) => {
    if (done) return;
    const ours = event.turn_id === turnId || (event.session_id !== sessionId && isQuestionToUser(event));
    if (!ours) return;
    onEvent(event);
    if (event.session_id === sessionId && TURN_ENDS.has(event.type)) {
      done = true;
      hub.detachTarget(target);
      resolveEnded(event);
    }
  };
  const target: StreamTarget = {
    sessionId,
    wantsWorkers: () => true,
    deliver: (event) => {
      if (turnId === null) early.push(event);
      else handle(event);
    },
  };
  hub.attach(target);
  let submitted: ReturnType<Runtime['submitTurn']>;
  try {
    submitted = runtime.submitTurn(sessionId, message);
  } catch (error) {
    hub.detachTarget(target);
    throw error;
  }
  turnId = submitted.turnId;
  onStart(turnId);
  for (const event of early.splice(0)) handle(event);
  response.on('close', () => {
    if (done) return;
    hub.detachTarget(target);
    done = true;
    if (runtime.currentTurn(sessionId)?.turnId === submitted.turnId)
      runtime.cancelTurn(sessionId, submitted.turnId, 'client_disconnect');
  });
  return { sessionId, turnId: submitted.turnId, ended };
}
