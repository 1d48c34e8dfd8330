import { describe, expect, it } from 'vitest';
import { AuthThrottle } from '../../src/core/http/auth-throttle.js';

/** The per-peer slow-down of repeated 401s (issue 13, observation 4), on a clock the test moves. */
describe('AuthThrottle', () => {
  const options = { maxFailures: 5, windowMs: 60_000, baseDelayMs: 1_000, maxDelayMs: 8_000, maxPeers: 3 };

  it('pauses a peer at the fifth failure within the window, and only that peer', () => {
    const throttle = new AuthThrottle(options);
    const outcomes = [0, 1, 2, 3, 4].map((i) => throttle.failure('10.0.0.1', 1_000 + i));
    expect(outcomes.map((o) => o.blocked)).toEqual([false, false, false, false, true]);
    expect(throttle.retryAfterSeconds('10.0.0.1', 1_005)).toBe(1);
    expect(throttle.retryAfterSeconds('10.0.0.2', 1_005)).toBe(0);
    expect(throttle.retryAfterSeconds('10.0.0.1', 2_005)).toBe(0);
  });

  it('logs once per episode and doubles the pause up to the cap', () => {
    const throttle = new AuthThrottle(options);
    let now = 0;
    for (let i = 0; i < 4; i += 1) throttle.failure('p', now);
    expect(throttle.failure('p', now)).toMatchObject({ blocked: true, logNow: true, failures: 5 });
    const pauses: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      now += throttle.retryAfterSeconds('p', now) * 1000;
      const outcome = throttle.failure('p', now);
      expect(outcome).toMatchObject({ blocked: true, logNow: false });
      pauses.push(throttle.retryAfterSeconds('p', now));
    }
    expect(pauses).toEqual([2, 4, 8, 8, 8]);
  });

  it('forgives after a quiet window', () => {
    const throttle = new AuthThrottle(options);
    for (let i = 0; i < 3; i += 1) throttle.failure('q', 0);
    // Four failures a minute apart never add up to a pause.
    expect(throttle.failure('q', 61_000)).toMatchObject({ blocked: false, failures: 1 });
  });

  it('remembers at most maxPeers, forgetting the least recently seen', () => {
    const throttle = new AuthThrottle(options);
    for (let i = 0; i < 5; i += 1) throttle.failure('a', 0);
    throttle.failure('b', 1);
    throttle.failure('c', 2);
    throttle.failure('a', 3); // a is seen again: b is now the oldest
    throttle.failure('d', 4);
    expect(throttle.size).toBe(3);
    expect(throttle.retryAfterSeconds('a', 5)).toBeGreaterThan(0);
    expect(throttle.failure('b', 6).failures).toBe(1);
  });
});
