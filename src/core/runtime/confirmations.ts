import { MetisError } from '../errors.js';

export type ConfirmationDecision = 'allow' | 'deny' | 'timeout' | 'cancelled';

export interface ConfirmationAnswer {
  readonly decision: ConfirmationDecision;
  readonly scope: 'once' | 'session' | null;
  readonly respondingClient: string | null;
}

interface Pending {
  readonly sessionId: string;
  readonly resolve: (answer: ConfirmationAnswer) => void;
}

/**
 * Tool calls waiting for a user's decision (bus §6.4 `tool.confirmation_*`). The dispatcher waits on
 * `wait`; the HTTP route (or a test) calls `answer`. A timeout or a cancelled turn settles it too.
 */
export class ConfirmationBroker {
  private readonly pending = new Map<string, Pending>();

  wait(
    requestId: string,
    sessionId: string,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<ConfirmationAnswer> {
    return new Promise((resolve) => {
      const settle = (answer: ConfirmationAnswer) => {
        if (!this.pending.delete(requestId)) return;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(answer);
      };
      const timer = setTimeout(
        () => settle({ decision: 'timeout', scope: null, respondingClient: null }),
        timeoutMs,
      );
      const onAbort = () => settle({ decision: 'cancelled', scope: null, respondingClient: null });
      this.pending.set(requestId, { sessionId, resolve: settle });
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Answers a waiting request.
   * @throws MetisError METIS_ERR_CONFIRMATION_NOT_FOUND for an unknown, answered or expired request.
   */
  answer(
    sessionId: string,
    requestId: string,
    decision: 'allow' | 'deny',
    scope: 'once' | 'session' = 'once',
    respondingClient: string | null = null,
  ): void {
    const pending = this.pending.get(requestId);
    if (pending === undefined || pending.sessionId !== sessionId) {
      throw new MetisError(
        'METIS_ERR_CONFIRMATION_NOT_FOUND',
        `no pending confirmation ${requestId} in session ${sessionId}`,
      );
    }
    pending.resolve({ decision, scope, respondingClient });
  }

  /** Requests waiting in a session, for snapshots and `metis tail`. */
  pendingIn(sessionId: string): string[] {
    return [...this.pending].filter(([, p]) => p.sessionId === sessionId).map(([id]) => id);
  }
}
