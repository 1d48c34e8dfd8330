import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EventBus } from '../../src/core/bus/event-bus.js';
import { slow } from '../../src/core/bus/slow.js';
import { EventBusOverflowError, EventValidationError, FastPathHandlerError } from '../../src/core/errors.js';
import { CATALOG_ENTRIES } from '../../src/core/events/catalog/index.js';
import type { CatalogEntry } from '../../src/core/events/define.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { EnvelopeSchema } from '../../src/core/events/envelope.js';
import { arbitraryFromSchema, type JsonSchema, wrongTypeValue } from '../helpers/arbitrary-from-schema.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';

function collect(bus: EventBus, options: Parameters<EventBus['subscribe']>[0]['filter'] = undefined) {
  const seen: MetisEvent[] = [];
  bus.subscribe({ name: 'collector', fastPath: true, filter: options, handler: (e) => void seen.push(e) });
  return seen;
}

describe('EventBus emit', () => {
  it('stamps id, timestamp, seq, actor and sensitivity and returns at once', async () => {
    const bus = new EventBus({ validation: 'strict' });
    const seen = collect(bus, { session_ids: ['s1'] });
    const first = bus.emit(turnStarted('s1'))!;
    const second = bus.emit(turnCompleted('s1', first.id))!;
    expect(seen).toHaveLength(0); // dispatch is asynchronous
    await bus.flush();
    expect(seen.map((e) => e.id)).toEqual([first.id, second.id]);
    expect(first.id).toMatch(/^evt_[0-9A-Z]{26}$/);
    expect(second.id > first.id).toBe(true);
    expect([first.seq, second.seq]).toEqual([1, 2]);
    expect(first.actor).toBe('user');
    expect(second.actor).toBe('agent');
    expect(first.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(second.parent_event_id).toBe(first.id);
  });

  it('dispatchNow delivers what is queued at once, and is a no-op inside a dispatch (no reordering)', async () => {
    const bus = new EventBus({ validation: 'strict' });
    const seen: string[] = [];
    let emittedInside: MetisEvent | null = null;
    bus.subscribe({
      name: 'reentrant',
      fastPath: true,
      filter: { session_ids: ['s1'] },
      handler: (event) => {
        seen.push(event.id);
        if (emittedInside === null) {
          emittedInside = bus.emit(turnStarted('s1'))!;
          bus.dispatchNow(); // inside the dispatch: must not hand over the new event before the rest
        }
      },
    });
    const first = bus.emit(turnStarted('s1'))!;
    const second = bus.emit(turnCompleted('s1', first.id))!;
    expect(seen).toEqual([]);
    bus.dispatchNow();
    expect(seen).toEqual([first.id, second.id]);
    await bus.flush();
    expect(seen).toEqual([first.id, second.id, emittedInside!.id]);
  });

  it('dispatchNow stays a no-op in a dispatch even after a handler flushed (a nested dispatch)', async () => {
    const bus = new EventBus({ validation: 'strict' });
    const seenA: string[] = [];
    const seenB: string[] = [];
    let step = 0;
    bus.subscribe({
      name: 'a',
      fastPath: true,
      filter: { session_ids: ['s1'] },
      handler: (event) => {
        seenA.push(event.id);
        if (step++ === 0) {
          bus.emit(turnCompleted('s1', null));
          void bus.flush(); // dispatches synchronously, inside this dispatch
          bus.emit(turnCompleted('s1', null));
          bus.dispatchNow(); // still inside the outer dispatch: must do nothing
        }
      },
    });
    bus.subscribe({
      name: 'b',
      fastPath: true,
      filter: { session_ids: ['s1'] },
      handler: (e) => void seenB.push(e.id),
    });
    bus.emit(turnStarted('s1'));
    bus.emit(turnStarted('s1'));
    bus.dispatchNow();
    await bus.flush();
    expect(seenA).toHaveLength(4);
    expect(seenB).toEqual(seenA);
  });

  it('continues seq from the store for a session seen in an earlier process', async () => {
    const bus = new EventBus({ lastSeq: (id) => (id === 'old' ? 41 : 0) });
    expect(bus.emit(turnStarted('old'))!.seq).toBe(42);
    expect(bus.emit(turnStarted('new'))!.seq).toBe(1);
  });

  it('a seq seeded by a load is numbered after without asking the store, and never goes back', async () => {
    const asked: string[] = [];
    const bus = new EventBus({
      lastSeq: (id) => {
        asked.push(id);
        return 0;
      },
    });
    bus.seedSeq('loaded', 41);
    expect(bus.emit(turnStarted('loaded'))!.seq).toBe(42);
    // An event emitted here and not stored yet is newer than a load that could not see it.
    bus.seedSeq('loaded', 40);
    expect(bus.emit(turnStarted('loaded'))!.seq).toBe(43);
    // Another process wrote more since (a take-over): the load's is newer.
    bus.seedSeq('loaded', 50);
    expect(bus.emit(turnStarted('loaded'))!.seq).toBe(51);
    expect(asked).toEqual([]);
  });

  it('fills additive fields with null so stored payloads are complete', () => {
    const bus = new EventBus();
    const event = bus.emit(turnCompleted('s1', null))!;
    expect(event.payload).toMatchObject({ signals_extra: null, user_id: null, team_id: null });
  });
});

describe('validation modes (bus §3.2, §9.1 test 1)', () => {
  it('strict mode throws EventValidationError naming the type and the issue path', () => {
    const bus = new EventBus({ validation: 'strict' });
    const bad = turnStarted('s1');
    const payload = { ...bad.payload, estimated_input_tokens: 'many' };
    let caught: unknown;
    try {
      bus.emitDynamic({ ...bad, payload });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(EventValidationError);
    const error = caught as EventValidationError;
    expect(error.eventType).toBe('turn.started');
    expect(error.issues[0]?.path).toBe('estimated_input_tokens');
    expect(error.message).toContain('turn.started');
    expect(error.message).toContain('estimated_input_tokens');
    expect(error.code).toBe('METIS_ERR_EVENT_VALIDATION');
  });

  it('strict mode rejects an unknown type', () => {
    const bus = new EventBus({ validation: 'strict' });
    expect(() => bus.emitDynamic({ type: 'made.up', session_id: 's', payload: {} })).toThrow(
      /unknown event type "made.up"/,
    );
  });

  it('lenient mode logs at ERROR, drops the event and affects nothing else', async () => {
    const { logger, at } = captureLogs();
    const bus = new EventBus({ validation: 'lenient', logger });
    const seen = collect(bus, { session_ids: ['s1'] });
    const bad = turnStarted('s1');
    expect(bus.emitDynamic({ ...bad, payload: { ...bad.payload, has_images: 'no' } })).toBeNull();
    expect(bus.emitDynamic({ type: 'made.up', session_id: 's1', payload: {} })).toBeNull();
    const good = bus.emit(turnStarted('s1'))!;
    await bus.flush();
    await settleLogs();
    expect(seen.map((e) => e.id)).toEqual([good.id]);
    expect(good.seq).toBe(1); // dropped events consume no seq, so they leave no hole
    const errors = at(LEVEL.error);
    expect(errors).toHaveLength(2);
    expect(errors[0]!.msg).toContain('has_images');
  });
});

describe('subscribers', () => {
  it('refuses a slow() handler on the fast path (§9.1 test 4)', () => {
    const bus = new EventBus();
    const handler = slow(async () => {});
    expect(() => bus.subscribe({ name: 'slowpoke', fastPath: true, handler })).toThrow(FastPathHandlerError);
    expect(bus.subscriptions()).toHaveLength(0);
    expect(() => bus.subscribe({ name: 'slowpoke', fastPath: false, handler })).not.toThrow();
  });

  it('isolates a failing handler: others get every event, it is logged at WARN and stays (§9.1 test 5)', async () => {
    const { logger, at, records } = captureLogs();
    const bus = new EventBus({ logger });
    const good: string[] = [];
    const failingFast = bus.subscribe({
      name: 'always-fails',
      fastPath: true,
      filter: { session_ids: ['s1'] },
      handler: () => {
        throw new Error('boom');
      },
    });
    const failingAsync = bus.subscribe({
      name: 'always-rejects',
      filter: { session_ids: ['s1'] },
      handler: async () => {
        throw new Error('async boom');
      },
    });
    bus.subscribe({
      name: 'good',
      fastPath: true,
      filter: { session_ids: ['s1'] },
      handler: (e) => void good.push(e.id),
    });
    const ids = [1, 2, 3].map(() => bus.emit(turnStarted('s1'))!.id);
    await bus.flush();
    await settleLogs();
    expect(good).toEqual(ids);
    const warnings = at(LEVEL.warn);
    expect(warnings.filter((w) => w.subscription === 'always-fails')).toHaveLength(3);
    expect(warnings.filter((w) => w.subscription === 'always-rejects')).toHaveLength(3);
    expect(bus.subscriptions()).toContain(failingFast);
    expect(bus.subscriptions()).toContain(failingAsync);
    expect(failingFast.stats.failed).toBe(3);
    // Failures are logs, never events.
    expect(records.some((r) => String(r.msg).includes('bus.handler_error'))).toBe(false);
  });

  it('delivers only what each filter dimension selects (§9.1 test 6)', async () => {
    const bus = new EventBus();
    const bySession = collect(bus, { session_ids: ['a'] });
    const byType = collect(bus, { event_types: ['turn.completed'] });
    const byActor = collect(bus, { actors: ['user'] });
    const combined = collect(bus, { session_ids: ['b'], event_types: ['turn.started'], actors: ['user'] });
    const emitted = [
      bus.emit(turnStarted('a'))!,
      bus.emit(turnCompleted('a', null))!,
      bus.emit(turnStarted('b'))!,
      bus.emit(turnCompleted('b', null))!,
      bus.emit(sessionCreated('c'))!,
    ];
    await bus.flush();
    const domain = (list: MetisEvent[]) => list.filter((e) => !e.type.startsWith('bus.')).map((e) => e.id);
    expect(domain(bySession)).toEqual([emitted[0]!.id, emitted[1]!.id]);
    expect(domain(byType)).toEqual([emitted[1]!.id, emitted[3]!.id]);
    expect(domain(byActor)).toEqual([emitted[0]!.id, emitted[2]!.id]);
    expect(domain(combined)).toEqual([emitted[2]!.id]);
  });

  it('announces subscribe and unsubscribe as bus events; unsubscribe is idempotent', async () => {
    const bus = new EventBus();
    const meta = collect(bus, { event_types: ['bus.subscriber_registered', 'bus.subscriber_unregistered'] });
    const handle = bus.subscribe({
      name: 'temp',
      filter: { event_types: ['turn.started'] },
      handler: () => {},
    });
    bus.unsubscribe(handle);
    bus.unsubscribe(handle);
    await bus.flush();
    const about = meta.filter((e) => e.payload.subscription_name === 'temp');
    expect(about.map((e) => e.type)).toEqual(['bus.subscriber_registered', 'bus.subscriber_unregistered']);
    expect(about[0]!.payload.filter).toEqual({
      session_ids: null,
      event_types: ['turn.started'],
      actors: null,
    });
    expect(about[1]!.payload.reason).toBe('explicit');
    expect(about[0]!.session_id).toBe('system');
  });

  it('a slow async subscriber never delays the emitter or fast subscribers', async () => {
    const bus = new EventBus();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slowSeen: string[] = [];
    bus.subscribe({
      name: 'slow',
      filter: { session_ids: ['s'] },
      handler: slow(async (e: MetisEvent) => {
        await gate;
        slowSeen.push(e.id);
      }),
    });
    const fast = collect(bus, { session_ids: ['s'] });
    for (let i = 0; i < 100; i += 1) bus.emit(turnStarted('s'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(fast).toHaveLength(100);
    expect(slowSeen).toHaveLength(0);
    release();
    await bus.flush();
    expect(slowSeen).toHaveLength(100);
  });
});

describe('sensitivity tagging (§9.1 test 8)', () => {
  it('records the catalog floor by default and the opt-in class when the field is populated', () => {
    const bus = new EventBus();
    expect(bus.emit(turnStarted('s'))!.sensitivity).toBe('private');
    expect(bus.emit(turnStarted('s', 'what time is it?'))!.sensitivity).toBe('user_controlled');
    expect(bus.emit(sessionCreated('s'))!.sensitivity).toBe('pseudonymous');
  });

  it('lets a caller be more cautious but never less private than the catalog says', () => {
    const bus = new EventBus();
    expect(bus.emit({ ...sessionCreated('s'), sensitivity: 'private' })!.sensitivity).toBe('private');
    expect(bus.emit({ ...turnStarted('s'), sensitivity: 'aggregatable' })!.sensitivity).toBe('private');
  });
});

describe('forward compatibility (§9.1 test 9)', () => {
  it('a subscriber skips a type from a future catalog with a debug log and does not raise', async () => {
    const { CATALOG } = await import('../../src/core/events/catalog/index.js');
    const { defineEventType } = await import('../../src/core/events/define.js');
    const { z } = await import('zod');
    const future = defineEventType({
      type: 'turn.paused',
      domain: 'turn',
      schema: z.strictObject({ note: z.string() }),
      sensitivity: 'pseudonymous',
      actors: ['system'],
      phase: '9',
      audit: false,
      parent: 'turn.started',
      description: 'A type this build does not know.',
    });
    const { logger, at } = captureLogs();
    const bus = new EventBus({ logger, catalog: new Map([...CATALOG, [future.type, future]]) });
    const current: MetisEvent[] = [];
    const everything: MetisEvent[] = [];
    bus.subscribe({
      name: 'current',
      fastPath: true,
      filter: { session_ids: ['s'] },
      handler: (e) => void current.push(e),
    });
    bus.subscribe({
      name: 'everything',
      fastPath: true,
      knownTypes: 'all',
      filter: { session_ids: ['s'] },
      handler: (e) => void everything.push(e),
    });
    bus.emitDynamic({ type: 'turn.paused', session_id: 's', payload: { note: 'later' } });
    const known = bus.emit(turnStarted('s'))!;
    await bus.flush();
    await settleLogs();
    expect(current.map((e) => e.id)).toEqual([known.id]);
    expect(everything.map((e) => e.type)).toEqual(['turn.paused', 'turn.started']);
    const debug = at(LEVEL.debug).filter((r) => r.subscription === 'current');
    expect(debug).toHaveLength(1);
    expect(debug[0]!.type).toBe('turn.paused');
  });
});

describe('bounded queue (§9.1 test 10)', () => {
  it('raises EventBusOverflowError at the emitter, logs at ERROR, emits no bus.overflow event', async () => {
    const { logger, at } = captureLogs();
    const bus = new EventBus({ logger, queueLimit: 50 });
    const seen = collect(bus);
    await bus.flush();
    seen.length = 0;
    for (let i = 0; i < 50; i += 1) bus.emit(turnStarted('s'));
    expect(() => bus.emit(turnStarted('s'))).toThrow(EventBusOverflowError);
    await bus.flush();
    await settleLogs();
    expect(at(LEVEL.error).some((r) => r.msg.includes('overflow'))).toBe(true);
    expect(seen).toHaveLength(50);
    expect(seen.some((e) => e.type.includes('overflow'))).toBe(false);
    // After draining, emit works again and seq has no hole.
    expect(bus.emit(turnStarted('s'))!.seq).toBe(51);
  });
});

describe('recursive failure (§9.1 test 14)', () => {
  it('a subscriber on all events that always raises causes no event flood and bounded logs', async () => {
    const { logger, at } = captureLogs();
    const bus = new EventBus({ logger });
    const all = collect(bus);
    bus.subscribe({
      name: 'raises-on-everything',
      fastPath: true,
      handler: () => {
        throw new Error('always');
      },
    });
    await bus.flush();
    const before = all.length;
    const sessionEvents = 500;
    for (let i = 0; i < sessionEvents; i += 1) bus.emit(turnStarted('s'));
    await bus.flush();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await bus.flush();
    await settleLogs();
    expect(all.length - before).toBe(sessionEvents); // nothing beyond what was emitted
    const warnings = at(LEVEL.warn).filter((r) => r.subscription === 'raises-on-everything');
    expect(warnings.length).toBeGreaterThan(0);
    expect(warnings.length).toBeLessThanOrEqual(20); // first ten in full, then one per hundred
  });
});

describe('every catalog type through a real bus, strict and lenient (§9.1 test 1)', () => {
  /** A fixed seed keeps a failure reproducible; test/catalog-property.test.ts covers many samples. */
  const SEED = 9_1_1;

  interface Case {
    readonly entry: CatalogEntry;
    readonly valid: Record<string, unknown>;
    readonly invalid: Record<string, unknown>;
    /** The payload field the invalid payload breaks: the zod issue path the error must name. */
    readonly brokenField: string;
    readonly how: 'missing required field' | 'wrong type';
  }

  function caseFor(entry: CatalogEntry, index: number): Case {
    const schema = z.toJSONSchema(entry.schema, { io: 'input' }) as JsonSchema;
    const [valid] = fc.sample(arbitraryFromSchema(schema), { numRuns: 1, seed: SEED + index }) as [
      Record<string, unknown>,
    ];
    const required = schema.required ?? [];
    const properties = schema.properties ?? {};
    const wrongTyped = Object.keys(properties).filter(
      (key) => wrongTypeValue(properties[key]!) !== undefined,
    );
    // Alternate between the two kinds of breakage so both are exercised across the catalog; a type
    // that offers only one kind gets that one.
    const dropRequired = required.length > 0 && (index % 2 === 0 || wrongTyped.length === 0);
    if (dropRequired) {
      const key = required[0]!;
      const { [key]: _dropped, ...rest } = valid;
      return { entry, valid, invalid: rest, brokenField: key, how: 'missing required field' };
    }
    const key = wrongTyped[0];
    if (key === undefined)
      throw new Error(`${entry.type}: no required field and no field with a type to break`);
    return {
      entry,
      valid,
      invalid: { ...valid, [key]: wrongTypeValue(properties[key]!) },
      brokenField: key,
      how: 'wrong type',
    };
  }

  const cases = CATALOG_ENTRIES.map(caseFor);

  it('covers the whole catalog, breaking payloads both ways', () => {
    expect(cases.map((c) => c.entry.type)).toEqual(CATALOG_ENTRIES.map((e) => e.type));
    expect(new Set(cases.map((c) => c.how))).toEqual(new Set(['missing required field', 'wrong type']));
  });

  describe.each(cases.map((c) => [c.entry.type, c] as const))('%s', (type, c) => {
    const sessionId = `sess_${type}`;

    function subscribe(bus: EventBus): MetisEvent[] {
      const seen: MetisEvent[] = [];
      bus.subscribe({
        name: `catalog-${type}`,
        fastPath: true,
        filter: { session_ids: [sessionId] },
        handler: (e) => void seen.push(e),
      });
      return seen;
    }

    it('strict: a valid payload is accepted and delivered as a valid envelope', async () => {
      const bus = new EventBus({ validation: 'strict' });
      const seen = subscribe(bus);
      const event = bus.emitDynamic({ type, session_id: sessionId, payload: c.valid });
      expect(event).not.toBeNull();
      await bus.flush();
      expect(seen).toHaveLength(1);
      const delivered = seen[0]!;
      expect(delivered).toBe(event);
      expect(() => EnvelopeSchema.parse(delivered)).not.toThrow();
      const payload = c.entry.schema.parse(c.valid) as Record<string, unknown>;
      expect(delivered).toMatchObject({ type, session_id: sessionId, seq: 1, payload });
      expect(c.entry.actors).toContain(delivered.actor);
      expect(delivered.sensitivity).toBe(c.entry.resolveSensitivity?.(payload) ?? c.entry.sensitivity);
    });

    it(`strict: an invalid payload throws EventValidationError naming the type and the path`, async () => {
      const bus = new EventBus({ validation: 'strict' });
      const seen = subscribe(bus);
      let caught: unknown;
      try {
        bus.emitDynamic({ type, session_id: sessionId, payload: c.invalid });
      } catch (error) {
        caught = error;
      }
      expect(caught, `${c.how}: ${c.brokenField}`).toBeInstanceOf(EventValidationError);
      const error = caught as EventValidationError;
      expect(error.eventType).toBe(type);
      expect(error.issues.map((i) => i.path)).toContain(c.brokenField);
      expect(error.message).toContain(`"${type}"`);
      expect(error.message).toContain(c.brokenField);
      await bus.flush();
      expect(seen).toHaveLength(0);
    });

    it('lenient: the same invalid payload is dropped, logged at ERROR, and nothing is delivered', async () => {
      const { logger, at } = captureLogs();
      const bus = new EventBus({ validation: 'lenient', logger });
      const seen = subscribe(bus);
      expect(bus.emitDynamic({ type, session_id: sessionId, payload: c.invalid })).toBeNull();
      await bus.flush();
      await settleLogs();
      expect(seen).toHaveLength(0);
      const errors = at(LEVEL.error);
      expect(errors).toHaveLength(1);
      expect(errors[0]!.type).toBe(type);
      expect((errors[0]!.issues as { path: string }[]).map((i) => i.path)).toContain(c.brokenField);
      expect(errors[0]!.msg).toContain(c.brokenField);
      // The bus is unharmed: the valid payload still goes through, with no seq hole.
      const good = bus.emitDynamic({ type, session_id: sessionId, payload: c.valid })!;
      await bus.flush();
      expect(seen).toEqual([good]);
      expect(good.seq).toBe(1);
    });
  });
});
