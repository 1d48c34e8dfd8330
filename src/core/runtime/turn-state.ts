import type { PayloadOf } from '../events/catalog/index.js';
import type { ModelAdapter } from './model-adapter.js';

/** Why a turn was cancelled (streaming §6: `turn.cancelled.reason`). */
export const CANCEL_REASONS = ['user_cancel', 'client_disconnect', 'timeout'] as const;
export type CancelReason = (typeof CANCEL_REASONS)[number];

export function isCancelReason(value: unknown): value is CancelReason {
  return (CANCEL_REASONS as readonly unknown[]).includes(value);
}

/**
 * Cancels a turn once: records why, then aborts its signal with the reason, so that what runs under the
 * turn (a delegated worker) can cancel for the same reason. False when it was already cancelling.
 */
export function cancelTurnState(state: TurnState, reason: CancelReason): boolean {
  if (state.cancelReason !== null) return false;
  state.cancelReason = reason;
  state.controller.abort(reason);
  return true;
}

/** The live state of one turn; `cancel` flips it to cancelling exactly once. */
export interface TurnState {
  readonly turnId: string;
  readonly controller: AbortController;
  cancelReason: CancelReason | null;
  /** A user override (`route.overridden`) the loop has not applied yet: the next model call uses it. */
  redirect?: Redirect | null;
  /** Aborts the model call in flight only (an override cuts it); the turn goes on. */
  callAbort?: AbortController | null;
  /** Set, synchronously, as the turn emits its terminal event: nothing can be re-dispatched after. */
  ending?: boolean;
}

/** Where an override sends the rest of a turn. */
export interface Redirect {
  readonly model: string;
  readonly adapter: ModelAdapter;
  /** The decision overridden: parent of `route.overridden`, which parents the next `llm.call_started`. */
  readonly routeDecidedId: string;
  /** The `route.overridden` payload, emitted once the call in flight is closed. */
  readonly payload: PayloadOf<'route.overridden'>;
}

/**
 * Re-dispatches a running turn to another model (bus §6.5b): the call in flight, if any, is cut, and the
 * next call goes to `redirect.model`. False when the turn is already ending.
 */
export function redirectTurn(state: TurnState, redirect: Redirect): boolean {
  if (state.ending === true || state.cancelReason !== null) return false;
  state.redirect = redirect;
  state.callAbort?.abort('route_overridden');
  return true;
}

/** How a turn ended, whichever way it did (the agent loop, a failure closed around it, a worker's). */
export interface TurnOutcome {
  readonly status: 'completed' | 'cancelled' | 'failed';
  readonly model: string;
  readonly finalText: string;
  readonly llmCalls: number;
  readonly toolCalls: number;
  readonly costUsd: number;
  readonly wallTimeSeconds: number;
}
