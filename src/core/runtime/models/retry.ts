import { setTimeout as sleep } from 'node:timers/promises';
import { backoffMs } from '../../backoff.js';
import { type AdapterChunk, AdapterError, type AdapterResult } from '../model-adapter.js';
import type { ClassifiedError } from './error-mapping.js';

export interface RetryPolicy {
  /** Retries after the first attempt. */
  readonly maxRetries: number;
  /** First backoff; each retry doubles it (with ±25% jitter), up to `maxDelayMs`. */
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  /** A `retry-after` longer than this is not waited for: the call fails at once. */
  readonly maxRetryAfterMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxRetries: 2,
  baseDelayMs: 500,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 60_000,
};

/**
 * Wait before retry number `retry` (0 for the first): the provider's `retry-after` when it sent one,
 * else exponential backoff. `null` when the provider asks for a longer wait than the policy allows.
 */
export function retryDelayMs(
  retry: number,
  retryAfterMs: number | null,
  policy: RetryPolicy,
  random: () => number = Math.random,
): number | null {
  if (retryAfterMs !== null) return retryAfterMs > policy.maxRetryAfterMs ? null : retryAfterMs;
  const exponential = backoffMs({ baseMs: policy.baseDelayMs, maxMs: policy.maxDelayMs }, retry);
  return Math.round(exponential * (0.75 + random() * 0.5));
}

/**
 * Runs `attempt` (one HTTP call streamed into canonical chunks) and retries it with backoff while it
 * fails before yielding its first chunk — once a token reached the loop, a retry would duplicate it,
 * so later failures end the call. Every failure leaves as an AdapterError carrying how many retries
 * were made. Closing this generator closes the attempt, which aborts its HTTP request.
 */
export async function* streamWithRetries(options: {
  readonly policy: RetryPolicy;
  readonly signal: AbortSignal;
  readonly attempt: () => AsyncGenerator<AdapterChunk, AdapterResult, void>;
  readonly classify: (error: unknown) => ClassifiedError;
}): AsyncGenerator<AdapterChunk, AdapterResult, void> {
  const { policy, signal } = options;
  let retries = 0;
  for (;;) {
    const attempt = options.attempt();
    let yielded = false;
    try {
      for (;;) {
        const next = await attempt.next();
        if (next.done) return next.value;
        yielded = true;
        yield next.value;
      }
    } catch (error) {
      const failure = options.classify(error);
      if (failure.errorClass === 'cancelled' || signal.aborted) {
        throw new AdapterError('cancelled', failure.message, retries);
      }
      const delay =
        !yielded && failure.retryable && retries < policy.maxRetries
          ? retryDelayMs(retries, failure.retryAfterMs, policy)
          : null;
      if (delay === null)
        throw new AdapterError(failure.errorClass, failure.message, retries, providerRequestIdOf(error));
      try {
        await sleep(delay, undefined, { signal });
      } catch {
        throw new AdapterError('cancelled', 'the request was cancelled while waiting to retry', retries);
      }
      retries += 1;
    } finally {
      // A no-op when the attempt finished; otherwise (the loop closed us) it aborts the request.
      await attempt.return(undefined as never).catch(() => undefined);
    }
  }
}

/** The provider's request id on an SDK error (both SDKs call it `requestID`), if the answer had one. */
function providerRequestIdOf(error: unknown): string | null {
  const id = (error as { requestID?: unknown } | null)?.requestID;
  return typeof id === 'string' && id.length > 0 ? id : null;
}
