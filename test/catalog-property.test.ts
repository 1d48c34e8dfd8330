import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CATALOG_ENTRIES } from '../src/core/events/catalog/index.js';
import type { CatalogEntry, StreamingEntry } from '../src/core/events/define.js';
import { isMorePrivate } from '../src/core/events/envelope.js';
import { STREAMING_ENTRIES } from '../src/core/events/streaming.js';
import { arbitraryFromSchema, type JsonSchema, wrongTypeValue } from './helpers/arbitrary-from-schema.js';

const NUM_RUNS = 30;
const ENTRIES: readonly (CatalogEntry | StreamingEntry)[] = [...CATALOG_ENTRIES, ...STREAMING_ENTRIES];

function inputSchema(entry: CatalogEntry | StreamingEntry): JsonSchema {
  return z.toJSONSchema(entry.schema, { io: 'input' }) as JsonSchema;
}

function rejects(entry: CatalogEntry | StreamingEntry, payload: unknown): boolean {
  return !entry.schema.safeParse(payload).success;
}

describe.each(ENTRIES.map((entry) => [entry.type, entry] as const))('%s payloads', (_type, entry) => {
  const schema = inputSchema(entry);
  const payloads = arbitraryFromSchema(schema) as fc.Arbitrary<Record<string, unknown>>;
  const required = schema.required ?? [];
  const properties = schema.properties ?? {};
  const wrongTyped = Object.keys(properties).filter((key) => wrongTypeValue(properties[key]!) !== undefined);

  it('accepts every payload generated from its JSON Schema', () => {
    fc.assert(
      fc.property(payloads, (payload) => {
        const result = entry.schema.safeParse(payload);
        if (!result.success) throw new Error(`${JSON.stringify(payload)}: ${result.error.message}`);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  // Registered only where it applies: a type with nothing to check has no test rather than a skipped one.
  if (!(required.length === 0))
    it('rejects a payload missing a required key', () => {
      fc.assert(
        fc.property(payloads, fc.constantFrom(...required), (payload, key) => {
          const { [key]: _dropped, ...rest } = payload;
          expect(rejects(entry, rest)).toBe(true);
        }),
        { numRuns: NUM_RUNS },
      );
    });

  it('rejects a payload with an unknown key', () => {
    expect(properties).not.toHaveProperty('x_unknown_field');
    fc.assert(
      fc.property(payloads, fc.jsonValue(), (payload, value) => {
        expect(rejects(entry, { ...payload, x_unknown_field: value })).toBe(true);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  // Registered only where it applies: a type with nothing to check has no test rather than a skipped one.
  if (!(wrongTyped.length === 0))
    it('rejects a field of the wrong type', () => {
      fc.assert(
        fc.property(payloads, fc.constantFrom(...wrongTyped), (payload, key) => {
          expect(rejects(entry, { ...payload, [key]: wrongTypeValue(properties[key]!) })).toBe(true);
        }),
        { numRuns: NUM_RUNS },
      );
    });

  const resolve = entry.family === 'catalog' ? entry.resolveSensitivity : undefined;
  // Registered only where it applies: a type with nothing to check has no test rather than a skipped one.
  if (!(resolve === undefined))
    it('never resolves a sensitivity more private than the floor', () => {
      fc.assert(
        fc.property(payloads, (payload) => {
          const actual = resolve!(entry.schema.parse(payload));
          expect(isMorePrivate(actual, entry.sensitivity)).toBe(false);
        }),
        { numRuns: NUM_RUNS },
      );
    });
});
