import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CATALOG_ENTRIES } from '../src/core/events/catalog/index.js';
import type { CatalogEntry, StreamingEntry } from '../src/core/events/define.js';
import { STREAMING_ENTRIES } from '../src/core/events/streaming.js';

/** Recursively sorts object keys (arrays keep their order: enum and `required` order are data). */
function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((key) => [key, sortKeys((value as Record<string, unknown>)[key])]),
    );
  }
  return value;
}

/** The payload as an emitter writes it: additive fields (with a default) are optional. */
function payloadSchema(entry: CatalogEntry | StreamingEntry): Record<string, unknown> {
  const { $schema: _drop, ...schema } = z.toJSONSchema(entry.schema, { io: 'input' }) as Record<
    string,
    unknown
  >;
  return schema;
}

function contractOf(entry: CatalogEntry | StreamingEntry): Record<string, unknown> {
  const common = {
    family: entry.family,
    domain: entry.domain,
    sensitivity: entry.sensitivity,
    actors: entry.actors,
    payload: payloadSchema(entry),
  };
  if (entry.family === 'streaming') return common;
  return {
    ...common,
    phase: entry.phase,
    audit: entry.audit,
    dynamic_sensitivity: entry.resolveSensitivity !== undefined,
  };
}

describe('the JSON Schema of the contract', () => {
  it('converts every payload schema without an unrepresentable construct', () => {
    for (const entry of [...CATALOG_ENTRIES, ...STREAMING_ENTRIES]) {
      expect(() => payloadSchema(entry), entry.type).not.toThrow();
    }
  });

  it('matches the reviewed snapshot (any contract change shows in review)', async () => {
    const contract: Record<string, unknown> = {};
    for (const entry of [...CATALOG_ENTRIES, ...STREAMING_ENTRIES]) contract[entry.type] = contractOf(entry);
    await expect(`${JSON.stringify(sortKeys(contract), null, 2)}\n`).toMatchFileSnapshot(
      './__snapshots__/catalog.schema.json',
    );
  });
});
