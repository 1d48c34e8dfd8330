import { describe, expect, it } from 'vitest';
import { benchStream } from '../bench/stream.js';

// Smoke test only: the suite starts its server and client processes, runs every phase in quick mode and
// returns well-formed figures. Timing is judged by `npm run bench -- --only stream`, never here.
describe('bench stream smoke', () => {
  it('benchStream returns finite positive figures, each with its baseline', {
    timeout: 240_000,
  }, async () => {
    const figures = await benchStream({ quick: true });
    expect(figures.length).toBeGreaterThan(0);
    for (const f of figures) {
      expect(f.name).not.toBe('');
      expect(Number.isFinite(f.value), `${f.name} value`).toBe(true);
      expect(f.value, `${f.name} value`).toBeGreaterThan(0);
      expect(f.baseline, `${f.name} baseline`).toBeDefined();
      expect(Number.isFinite(f.baseline!.value), `${f.name} baseline value`).toBe(true);
      expect(f.baseline!.value, `${f.name} baseline value`).toBeGreaterThan(0);
    }
  });
});
