import { describe, expect, it } from 'vitest';
import { benchBus } from '../bench/bus.js';

// Smoke test only: the suite runs and returns well-formed figures. Timing is judged by `npm run bench`,
// never here (wall-clock assertions make tests flaky).
describe('bench smoke', () => {
  it('benchBus returns finite positive figures, each with its baseline', async () => {
    const figures = await benchBus({ quick: true });
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
