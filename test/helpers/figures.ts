import { expect } from 'vitest';
import type { Figure } from '../../bench/lib/stats.js';

/**
 * What every bench smoke test checks: at least one figure, each named, finite and with a finite
 * baseline, and both positive unless `mayBeNonPositive` says the figure is noise-level in quick mode.
 */
export function expectWellFormedFigures(
  figures: readonly Figure[],
  mayBeNonPositive: (name: string) => boolean = () => false,
): void {
  expect(figures.length).toBeGreaterThan(0);
  for (const f of figures) {
    expect(f.name).not.toBe('');
    expect(Number.isFinite(f.value), `${f.name} value`).toBe(true);
    expect(f.baseline, `${f.name} baseline`).toBeDefined();
    expect(Number.isFinite(f.baseline!.value), `${f.name} baseline value`).toBe(true);
    if (mayBeNonPositive(f.name)) continue;
    expect(f.value, `${f.name} value`).toBeGreaterThan(0);
    expect(f.baseline!.value, `${f.name} baseline value`).toBeGreaterThan(0);
  }
}
