/** How long to wait between attempts: `baseMs` doubled per attempt, never above `maxMs`. */
export interface Backoff {
  readonly baseMs: number;
  readonly maxMs: number;
}

/** Past this, doubling only overflows: the cap has long been reached for any sane base. */
const MAX_DOUBLINGS = 30;

/**
 * The wait before retry number `retry` (0 for the first): `baseMs × 2^retry`, capped at `maxMs`. The
 * one exponential backoff of metis; callers add their own jitter where many clients could retry in step.
 */
export function backoffMs(policy: Backoff, retry: number): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(Math.max(retry, 0), MAX_DOUBLINGS));
}
