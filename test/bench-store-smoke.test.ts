import { describe, it } from 'vitest';
import { benchStore } from '../bench/store.js';
import { expectWellFormedFigures } from './helpers/figures.js';

// Smoke test only: the store suite runs end to end (its writer child process included) and returns
// well-formed figures. Timing is judged by `npm run bench`, never here.
describe('bench store smoke', () => {
  it('benchStore returns finite positive figures, each with its baseline', async () => {
    const figures = await benchStore({ quick: true });
    expectWellFormedFigures(figures);
  }, 120_000);
});
