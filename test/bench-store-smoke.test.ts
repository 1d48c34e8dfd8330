import { describe, expect, it } from 'vitest';
import { benchStore } from '../bench/store.js';

// Smoke test only: the store suite runs end to end (its writer child process included) and returns
// well-formed figures. Timing is judged by `npm run bench`, never here.
describe('bench store smoke', () => {
  it('benchStore returns finite positive figures, each with its baseline', async () => {
    const figures = await benchStore({ quick: true });
    expect(figures.length).toBeGreaterThan(0);
    for (const f of figures) {
      expect(f.name).not.toBe('');
      expect(Number.isFinite(f.value), `${f.name} value`).toBe(true);
      expect(f.value, `${f.name} value`).toBeGreaterThan(0);
      expect(f.baseline, `${f.name} baseline`).toBeDefined();
      expect(Number.isFinite(f.baseline!.value), `${f.name} baseline value`).toBe(true);
      expect(f.baseline!.value, `${f.name} baseline value`).toBeGreaterThan(0);
    }
  }, 120_000);
});
