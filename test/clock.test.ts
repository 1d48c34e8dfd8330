import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isoToMicros, microsToIso } from '../src/core/events/clock.js';

// Up to 2099-12-31T23:59:59.999999Z, the range the trace store's timestamps live in.
const MAX_US = 4_102_444_799_999_999;

describe('clock: microsecond ISO timestamps', () => {
  it('round-trips every microsecond through microsToIso and isoToMicros (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: MAX_US }), (us) => {
        const iso = microsToIso(us);
        expect(iso).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
        expect(iso.slice(0, 23)).toBe(new Date(Math.floor(us / 1000)).toISOString().slice(0, 23));
        expect(isoToMicros(iso)).toBe(us);
      }),
      { numRuns: 2_000 },
    );
  });

  it('parses consecutive timestamps across second and day boundaries, not reusing a stale date', () => {
    const midnight = Date.parse('2026-11-22T00:00:00Z') * 1000;
    for (const us of [midnight - 1, midnight, midnight + 1, midnight + 999_999, midnight + 1_000_000]) {
      expect(isoToMicros(microsToIso(us))).toBe(us);
    }
    expect(isoToMicros('2026-11-21T23:59:59.999999Z')).toBe(midnight - 1);
    expect(isoToMicros('2026-11-22T00:00:00.000000Z')).toBe(midnight);
  });

  it('parses other ISO forms as Date.parse does, keeping microseconds when given', () => {
    expect(isoToMicros('2026-11-22T07:37:03Z')).toBe(Date.parse('2026-11-22T07:37:03Z') * 1000);
    expect(isoToMicros('2026-11-22T07:37:03.5Z')).toBe(Date.parse('2026-11-22T07:37:03.500Z') * 1000);
    expect(isoToMicros('2026-11-22T07:37:03.123Z')).toBe(Date.parse('2026-11-22T07:37:03.123Z') * 1000);
    expect(isoToMicros('2026-11-22T07:37:03.1234Z')).toBe(
      Date.parse('2026-11-22T07:37:03.123Z') * 1000 + 400,
    );
    expect(isoToMicros('2026-11-22T08:37:03.000000+01:00')).toBe(Date.parse('2026-11-22T07:37:03Z') * 1000);
  });

  it('gives NaN for text that is not a timestamp, including canonical-length near misses', () => {
    for (const bad of ['', 'yesterday', '2026-13-45T07:37:03.000000Z', '2026-11-22T07:37:03.00000xZ']) {
      expect(isoToMicros(bad), bad).toBeNaN();
    }
  });
});
