import type { Logger } from 'pino';
import type { CancelReason } from './turn-state.js';

/**
 * Streaming §6.5: a cancel of a turn already cancelling or ended is a no-op with no canonical event;
 * the server logs `bus.handler_warning`: at warn the first time in a session, then at debug (a client
 * that cancels twice, or a suite that does on purpose, floods no log).
 */
export function logRedundantCancel(
  logger: Logger,
  session: { redundantCancelLogged?: boolean },
  details: {
    readonly sessionId: string;
    readonly turnId: string;
    readonly reason: CancelReason;
    readonly cancellingReason: CancelReason | null;
    readonly outcome: 'already_cancelling' | 'already_ended';
  },
): void {
  const level = session.redundantCancelLogged ? 'debug' : 'warn';
  session.redundantCancelLogged = true;
  logger[level](
    {
      diagnostic: 'bus.handler_warning',
      session_id: details.sessionId,
      turn_id: details.turnId,
      reason: details.reason,
      cancelling_reason: details.cancellingReason,
      outcome: details.outcome,
    },
    details.outcome === 'already_cancelling'
      ? 'redundant cancel ignored: the turn is already cancelling'
      : 'redundant cancel ignored: the turn has already ended',
  );
}
