import type { ConfirmationRequest } from '../confirmation-request.js';
import { MetisError } from '../errors.js';

export type ConfirmationDecision = 'allow' | 'deny' | 'timeout' | 'cancelled';

export interface ConfirmationAnswer {
  readonly decision: ConfirmationDecision;
  readonly scope: 'once' | 'session' | null;
  readonly respondingClient: string | null;
  /** Why the user denied it, when they said (the AI SDK's approval response carries one): the model is told. */
  readonly reason?: string;
}

interface Pending {
  readonly request: ConfirmationRequest;
  readonly resolve: (answer: ConfirmationAnswer) => void;
}

/** How an answer is checked: who may answer for the request's session, and what the user was shown. */
export interface AnswerChecks {
  /** Whether `answeringSession` may answer a request of `ownerSession` (itself, or an ancestor). */
  readonly mayAnswer?: (ownerSession: string) => boolean;
  /** The `input_hash` of the input the user saw; a different one decides nothing. */
  readonly inputHash?: string;
  /** Not a check: why the user denied it, when they said (the model is told, with the tool's error). */
  readonly reason?: string;
}

/**
 * Tool calls waiting for a user's decision (bus §6.4 `tool.confirmation_*`). The dispatcher waits on
 * `wait`; the HTTP route (or a test) calls `answer`. A timeout or a cancelled turn settles it too.
 */
export class ConfirmationBroker {
  private readonly pending = new Map<string, Pending>();

  wait(request: ConfirmationRequest, timeoutMs: number, signal: AbortSignal): Promise<ConfirmationAnswer> {
    const requestId = request.confirmation_request_id;
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
      this.pending.set(requestId, { request, resolve: settle });
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Answers a waiting request of `sessionId`, or (with `checks.mayAnswer`) of a session it answers for.
   * @throws MetisError METIS_ERR_CONFIRMATION_NOT_FOUND for an unknown, answered or expired request,
   *   or one of a session `sessionId` does not answer for.
   * @throws MetisError METIS_ERR_CONFIRMATION_MISMATCH when `checks.inputHash` is not the input's hash;
   *   the request keeps waiting.
   */
  answer(
    sessionId: string,
    requestId: string,
    decision: 'allow' | 'deny',
    scope: 'once' | 'session' = 'once',
    respondingClient: string | null = null,
    checks: AnswerChecks = {},
  ): void {
    const pending = this.pending.get(requestId);
    const owner = pending?.request.session_id;
    const allowed = owner === sessionId || (owner !== undefined && checks.mayAnswer?.(owner) === true);
    if (pending === undefined || !allowed) {
      throw new MetisError(
        'METIS_ERR_CONFIRMATION_NOT_FOUND',
        `no pending confirmation ${requestId} in session ${sessionId}`,
      );
    }
    if (checks.inputHash !== undefined && checks.inputHash !== pending.request.input_hash) {
      throw new MetisError(
        'METIS_ERR_CONFIRMATION_MISMATCH',
        `confirmation ${requestId}: input_hash ${checks.inputHash} is not the hash of the pending input (${pending.request.input_hash}); nothing was decided`,
      );
    }
    const reason = checks.reason;
    pending.resolve({ decision, scope, respondingClient, ...(reason ? { reason } : {}) });
  }

  /** Requests waiting in a session, for snapshots and `metis tail`. */
  pendingIn(sessionId: string): string[] {
    return this.list([sessionId]).map((r) => r.confirmation_request_id);
  }

  /** The requests waiting in any of `sessionIds`, oldest first. */
  list(sessionIds: Iterable<string>): ConfirmationRequest[] {
    const wanted = new Set(sessionIds);
    return this.waiting().filter((r) => wanted.has(r.session_id));
  }

  /** Every request waiting, oldest first. */
  waiting(): ConfirmationRequest[] {
    return [...this.pending.values()].map((p) => p.request);
  }
}
