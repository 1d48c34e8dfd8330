import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { CATALOG_ENTRIES } from '../../src/core/events/catalog/index.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { eventJson, payloadJson } from '../../src/core/events/event-json.js';
import { STREAMING_ENTRIES } from '../../src/core/events/streaming.js';
import { StreamingChannel } from '../../src/core/runtime/streaming-channel.js';
import { arbitraryFromSchema, type JsonSchema } from '../helpers/arbitrary-from-schema.js';

/** The shared encoder must write exactly what JSON.stringify writes: the store, frames and replays agree on bytes. */

const ids = fc.option(fc.string({ minLength: 1, maxLength: 12 }), { nil: null });

describe('eventJson', () => {
  it('equals JSON.stringify for every catalog type as the bus stamps it', () => {
    const bus = new EventBus({ validation: 'strict' });
    for (const entry of CATALOG_ENTRIES) {
      const payloads = arbitraryFromSchema(z.toJSONSchema(entry.schema, { io: 'input' }) as JsonSchema);
      fc.assert(
        fc.property(payloads, ids, ids, fc.string({ minLength: 1 }), (payload, turn, parent, session) => {
          const event = bus.emitDynamic({
            type: entry.type,
            session_id: session,
            turn_id: turn,
            parent_event_id: parent,
            payload: payload as Record<string, unknown>,
          })!;
          expect(eventJson(event)).toBe(JSON.stringify(event));
          expect(payloadJson(event)).toBe(JSON.stringify(event.payload));
        }),
        { numRuns: 10 },
      );
    }
  });

  it('equals JSON.stringify for streaming events (seq null)', () => {
    const channel = new StreamingChannel();
    for (const entry of STREAMING_ENTRIES) {
      const payloads = arbitraryFromSchema(z.toJSONSchema(entry.schema, { io: 'input' }) as JsonSchema);
      fc.assert(
        fc.property(payloads, ids, (payload, turn) => {
          const event = channel.publish({
            type: entry.type,
            session_id: 'sess_1',
            turn_id: turn,
            parent_event_id: null,
            payload: payload as Record<string, unknown>,
          } as Parameters<StreamingChannel['publish']>[0]);
          expect(eventJson(event)).toBe(JSON.stringify(event));
        }),
        { numRuns: 10 },
      );
    }
  });

  it('encodes the payload once for the store and the frame', () => {
    let encoded = 0;
    const payload = { message_id: 'msg_1', content_block_index: 0, text: 'hi' };
    // JSON.stringify calls toJSON each time it meets the payload: the count is the number of encodings.
    Object.defineProperty(payload, 'toJSON', {
      value() {
        encoded += 1;
        return { ...this };
      },
    });
    const event = new StreamingChannel().publish({
      type: 'text.delta',
      session_id: 'sess_1',
      turn_id: 'turn_1',
      parent_event_id: null,
      payload,
    } as Parameters<StreamingChannel['publish']>[0]);
    expect(payloadJson(event)).toBe('{"message_id":"msg_1","content_block_index":0,"text":"hi"}');
    expect(eventJson(event)).toBe(JSON.stringify(event));
    expect(encoded).toBe(2); // once for the store and the frame, once more by the check's own JSON.stringify
  });

  it('falls back to JSON.stringify for objects not shaped as the bus stamps them', () => {
    const base = {
      id: 'evt_1',
      timestamp: '2026-11-27T00:00:00.000000Z',
      session_id: 's "quoted" \u2028',
      turn_id: null,
      parent_event_id: null,
      type: 'turn.started',
      actor: 'user',
      payload: { text: 'é 🙂 \n' },
      sensitivity: 'private',
      seq: 1,
    } as MetisEvent;
    const odd: MetisEvent[] = [
      { ...base },
      { ...base, extra: 1 } as MetisEvent,
      { ...base, turn_id: undefined } as unknown as MetisEvent,
      { ...base, seq: Number.NaN },
      Object.assign({ seq: 2 }, base) as MetisEvent, // the same keys in another order
    ];
    for (const event of odd) expect(eventJson(event)).toBe(JSON.stringify(event));
  });
});
