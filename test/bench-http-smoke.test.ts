import { describe, it } from 'vitest';
import { benchHttp } from '../bench/http.js';
import { benchSse } from '../bench/sse.js';
import { expectWellFormedFigures } from './helpers/figures.js';

// Smoke only: the suites run and return well-formed figures; timing is judged by `npm run bench`.
describe('bench smoke: http and sse', () => {
  it('benchHttp and benchSse return finite positive figures, each with its baseline', async () => {
    expectWellFormedFigures(await benchHttp({ quick: true }));
    expectWellFormedFigures(await benchSse({ quick: true }));
  }, 60_000);
});
