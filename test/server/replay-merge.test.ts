import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { EventJsonRow } from '../../src/core/store/event-rows.js';
import { mergeReplay, unionById } from '../../src/core/stream/replay-merge.js';

/** A minimal event: only `id` matters to the merge. */
const eventOf = (id: string): MetisEvent => ({ id, type: 'text.delta' }) as unknown as MetisEvent;

/** Two sorted id lists drawn from one pool, so they overlap at random. */
const overlappingIds = fc
  .tuple(fc.uniqueArray(fc.integer({ min: 0, max: 200 }), { maxLength: 60 }), fc.array(fc.boolean()))
  .map(([pool, picks]) => {
    const ids = [...pool].sort((x, y) => x - y).map((n) => `evt_${String(n).padStart(3, '0')}`);
    const a = ids.filter((_, i) => picks[i] !== false);
    const b = ids.filter((_, i) => picks[i] !== true || i % 3 === 0);
    return { a, b, all: [...new Set([...a, ...b])].sort() };
  });

describe('replay merge (the seam of §3.7: every id once, in id order)', () => {
  it('unionById keeps each id once, in order (property)', () => {
    fc.assert(
      fc.property(overlappingIds, ({ a, b, all }) => {
        expect(unionById(a.map(eventOf), b.map(eventOf)).map((e) => e.id)).toEqual(all);
      }),
    );
  });

  it('mergeReplay sends a stored row once, as stored, even when the same event is live (property)', () => {
    fc.assert(
      fc.property(overlappingIds, ({ a, b, all }) => {
        const rows: EventJsonRow[] = a.map((id) => [id, `"stored ${id}"`]);
        const frames = mergeReplay(rows, b.map(eventOf));
        expect(frames.map((f) => f.id)).toEqual(all);
        for (const frame of frames) {
          const stored = a.includes(frame.id);
          expect(frame.frame.startsWith('{"type":"event","event":')).toBe(true);
          expect(frame.frame.includes(`"stored ${frame.id}"`)).toBe(stored);
        }
      }),
    );
  });
});
