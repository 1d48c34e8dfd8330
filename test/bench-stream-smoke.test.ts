import { describe, expect, it } from 'vitest';
import { benchStream } from '../bench/stream.js';
import { expectWellFormedFigures } from './helpers/figures.js';

/**
 * In quick mode the memory phase opens 500 connections: a bare ws connection costs a few KB, so its RSS
 * delta (about 2 MB) is within the page-level noise of a process's RSS and has been measured below zero.
 * Those figures are checked for being numbers only; the heap figures, which GC makes exact, stay positive.
 */
const isRssFigure = (name: string): boolean => name.startsWith('memory per connection (RSS)');

// Smoke test only: the suite starts its server and client processes, runs every phase in quick mode and
// returns well-formed figures. Timing is judged by `npm run bench -- --only stream`, never here.
describe('bench stream smoke', () => {
  it('benchStream returns finite figures, each with its baseline, positive where not RSS noise', {
    timeout: 240_000,
  }, async () => {
    const figures = await benchStream({ quick: true });
    expect(figures.some((f) => isRssFigure(f.name))).toBe(true);
    expectWellFormedFigures(figures, isRssFigure);
  });
});
