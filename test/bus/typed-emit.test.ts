import { describe, expect, it } from 'vitest';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { EventValidationError } from '../../src/core/errors.js';

/**
 * Issue 28: `emit` is typed by the catalog, so a misspelt type or a wrong payload does not compile at
 * an emitter (`tsc --noEmit` over test/ runs in .ci/run: an `@ts-expect-error` below that no longer
 * meets an error fails the typecheck). The bus still checks at run time what the compiler cannot see.
 */
describe('emit typed by the catalog', () => {
  const bus = new EventBus({ validation: 'strict' });

  it('refuses at compile time, and at run time, a type the catalog does not have', () => {
    // @ts-expect-error 'turn.paused' is not a catalog type
    expect(() => bus.emit({ type: 'turn.paused', session_id: 's', payload: {} })).toThrow(
      EventValidationError,
    );
  });

  it('refuses at compile time, and at run time, a payload of the wrong shape', () => {
    expect(() =>
      bus.emit({
        type: 'feedback.implicit',
        session_id: 's',
        // @ts-expect-error `type` must be one of the implicit signals, and `confidence` a number
        payload: { type: 'shrug', confidence: 'high', subject_turn_id: null, context: {} },
      }),
    ).toThrow(EventValidationError);
  });

  it('takes a payload that fits, leaving out what the spec marks additive', () => {
    const event = bus.emit({
      type: 'feedback.implicit',
      session_id: 's',
      payload: { type: 'retry', confidence: 0.5, subject_turn_id: null, context: {} },
    });
    expect(event?.type).toBe('feedback.implicit');
  });
});
