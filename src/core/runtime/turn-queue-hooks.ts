import type { Logger } from 'pino';
import type { QueueRows } from '../store/queue-rows.js';
import type { Budgets } from './budget.js';
import type { ConversationMessage } from './model-adapter.js';
import type { CallResult } from './model-call.js';
import type { StartedTurn, TurnQueueHost, TurnQueues } from './turn-queue.js';
import type { TurnState } from './turn-state.js';

/** What the queue uses of the runtime (Runtime satisfies it; named here so no import goes up). */
interface TurnsOfSessions {
  submitTurn(sessionId: string, message: string, options: { model?: string | null }): StartedTurn;
  currentTurn(sessionId: string): StartedTurn | null;
  cancelTurn(sessionId: string, turnId: string, reason: 'user_cancel'): unknown;
  getSession(sessionId: string): { readonly status: 'active' | 'ended' };
}

/** The runtime as the turn queue sees it; an interrupt cancels with `user_cancel` (the user's choice). */
export function queueHost(
  runtime: TurnsOfSessions,
  logger: Logger,
  closed: () => boolean,
  rows: QueueRows,
): TurnQueueHost {
  return {
    startTurn: (sessionId, message, model) => runtime.submitTurn(sessionId, message, { model }),
    runningTurn: (sessionId) => runtime.currentTurn(sessionId),
    interrupt: (sessionId, turnId) => runtime.cancelTurn(sessionId, turnId, 'user_cancel'),
    acceptsTurns: (sessionId) => {
      if (closed()) return false;
      try {
        return runtime.getSession(sessionId).status === 'active';
      } catch {
        return false;
      }
    },
    rows,
    logger,
  };
}

/** What a turn does around each model call: wait at a reached budget, take steers, count the spend. */
export interface ModelCallHooks {
  readonly beforeModelCall: () => Promise<void>;
  readonly takeSteered: () => readonly string[];
  readonly afterModelCall: (
    call: CallResult,
    model: string,
    conversation: readonly ConversationMessage[],
  ) => void;
}

export function turnHooks(
  queues: TurnQueues,
  budgets: Budgets,
  sessionId: string,
  state: TurnState,
): ModelCallHooks {
  return {
    beforeModelCall: () => budgets.beforeModelCall(sessionId, state.turnId, state.controller.signal),
    takeSteered: () => queues.takeSteered(state.turnId),
    afterModelCall: (call, model, conversation) => budgets.charge(sessionId, model, call, conversation),
  };
}
