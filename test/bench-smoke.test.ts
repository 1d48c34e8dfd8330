import { describe, it } from 'vitest';
import { benchBus } from '../bench/bus.js';
import { expectWellFormedFigures } from './helpers/figures.js';

// Smoke test only: the suite runs and returns well-formed figures. Timing is judged by `npm run bench`,
// never here (wall-clock assertions make tests flaky).
describe('bench smoke', () => {
  it('benchBus returns finite positive figures, each with its baseline', async () => {
    const figures = await benchBus({ quick: true });
    expectWellFormedFigures(figures);
  });
});
