import { describe, it } from 'vitest';
import { benchGateway } from '../../bench/gateway.js';
import { expectWellFormedFigures } from '../helpers/figures.js';

// Smoke only: the suite runs and returns well-formed figures; timing is judged by `npm run bench`.
describe('bench smoke: gateway', () => {
  it('benchGateway returns finite figures against the fake upstream called directly', async () => {
    // The added latency may round to 0 in a quick run on a fast machine.
    expectWellFormedFigures(await benchGateway({ quick: true }), (name) => name.includes('adds'));
  }, 60_000);
});
