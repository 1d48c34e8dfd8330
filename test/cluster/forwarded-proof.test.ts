import { describe, expect, it } from 'vitest';
import { clusterKeys } from '../../src/core/cluster/cluster-keys.js';
import { forwardChecker, signForward } from '../../src/core/cluster/forwarded-proof.js';

/**
 * The proof a forwarded request carries (forwarded-proof.ts, issue 34 observation 3): the owner runs it
 * only when it was signed with the cluster's token, for this node, within the time window, and never
 * before. The same checks against real nodes are in broker-proof.test.ts.
 */

const KEY = clusterKeys('proof-test-token-0123456789abcdef').forwarding;
const REQUEST = { method: 'POST', url: '/sessions/sess_1/turns', body: '{"message":"hi"}' };

describe('the proof of a forwarded request', () => {
  it('lets a request signed for this node through once, and refuses it replayed', () => {
    const check = forwardChecker(KEY, 'node-a');
    const signed = signForward(KEY, 'node-b', 'node-a', REQUEST);
    expect(check(signed)).toEqual({ ok: true, from: 'node-b', request: REQUEST });
    expect(check(signed)).toEqual({ ok: false, reason: 'it was sent before (a replay)' });
    // The same request signed again is another request (a new nonce): it runs.
    expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST)).ok).toBe(true);
  });

  it('refuses another token, any field changed, no proof, or a request for another node', () => {
    const check = forwardChecker(KEY, 'node-a');
    const other = clusterKeys('another-token-0123456789abcdef').forwarding;
    const refusedFor = (envelope: unknown) => {
      const verdict = check(envelope);
      return verdict.ok ? 'ran' : verdict.reason;
    };
    expect(refusedFor(signForward(other, 'node-b', 'node-a', REQUEST))).toMatch(
      /not made with this cluster's token/,
    );
    const signed = signForward(KEY, 'node-b', 'node-a', REQUEST);
    for (const changed of [
      { url: '/sessions/sess_2/turns' },
      { method: 'PUT' },
      { body: '{"message":"rm"}' },
      { body: null },
      { from: 'node-c' },
      { at: signed.at + 1 },
      { nonce: 'A'.repeat(22) },
    ])
      expect(refusedFor({ ...signed, ...changed }), JSON.stringify(changed)).toMatch(/not made with/);
    expect(refusedFor({ method: 'POST', url: REQUEST.url, body: {} })).toMatch(/no proof/);
    expect(refusedFor(null)).toMatch(/no proof/);
    expect(refusedFor(signForward(KEY, 'node-b', 'node-c', REQUEST))).toBe('it is meant for node node-c');
  });

  it('refuses a request whose time is more than the window from the clock, either way', () => {
    const now = 1_000_000_000_000;
    const check = forwardChecker(KEY, 'node-a', { windowMs: 60_000, now: () => now });
    expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST, now - 60_000)).ok).toBe(true);
    expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST, now + 60_000)).ok).toBe(true);
    const old = signForward(KEY, 'node-b', 'node-a', REQUEST, now - 61_000);
    expect(check(old)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/61 s from this node's clock/),
    });
    expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST, now + 61_000)).ok).toBe(false);
  });

  it('refuses rather than forgets: past its bound of remembered requests, new ones wait', () => {
    const check = forwardChecker(KEY, 'node-a', { maxRemembered: 3 });
    for (let i = 0; i < 3; i += 1) expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST)).ok).toBe(true);
    expect(check(signForward(KEY, 'node-b', 'node-a', REQUEST))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/could not tell a replay/),
    });
  });
});
