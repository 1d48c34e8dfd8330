import { describe, expect, it } from 'vitest';
import { AttachTokens } from '../../src/core/http/attach-tokens.js';

/** Issue 13 observation 6: unused attach tokens were unbounded (20,000 of them cost ~30 MiB). */
describe('attach tokens are bounded', () => {
  it('keeps at most maxUnused unused tokens, forgetting the oldest first', () => {
    const tokens = new AttachTokens(60_000, 100);
    const issued = Array.from({ length: 20_000 }, (_, i) => tokens.issue(`sess_${i % 7}`));
    expect(tokens.size).toBe(100);
    // The oldest are gone; the newest still open their session once.
    expect(tokens.consume(issued[0]!, 'sess_0')).toBe(false);
    expect(tokens.consume(issued[19_899]!, `sess_${19_899 % 7}`)).toBe(false);
    const newest = 19_999;
    expect(tokens.consume(issued[newest]!, `sess_${newest % 7}`)).toBe(true);
    expect(tokens.consume(issued[newest]!, `sess_${newest % 7}`)).toBe(false);
    expect(tokens.consume(issued[19_900]!, `sess_${19_900 % 7}`)).toBe(true);
    expect(tokens.size).toBe(98);
  });

  it('still expires tokens after their ttl and refuses a foreign or reused one', async () => {
    const tokens = new AttachTokens(50, 10);
    const early = tokens.issue('sess_a');
    await new Promise((resolve) => setTimeout(resolve, 80));
    const late = tokens.issue('sess_a');
    expect(tokens.size).toBe(1); // the expired one was swept when the next was issued
    expect(tokens.consume(early, 'sess_a')).toBe(false);
    expect(tokens.consume(late, 'sess_b')).toBe(false);
    expect(tokens.consume(late, 'sess_a')).toBe(false);
  });
});
