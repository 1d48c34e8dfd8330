import { z } from 'zod';
import { MetisError } from '../errors.js';
import { CATALOG_ENTRIES } from './catalog/index.js';
import type { CatalogEntry, StreamingEntry } from './define.js';
import { STREAMING_ENTRIES } from './streaming.js';

export interface FieldDescription {
  readonly name: string;
  readonly type: string;
  readonly required: boolean;
  readonly nullable: boolean;
}

/** One row of `metis catalog`: the contract of one event type. */
export interface TypeDescription {
  readonly type: string;
  readonly domain: string;
  readonly family: 'catalog' | 'streaming';
  readonly sensitivity: string;
  readonly actors: readonly string[];
  readonly audit: boolean;
  readonly phase: string | null;
  readonly parent: string | null;
  readonly description: string;
  readonly dynamic_sensitivity: boolean;
  readonly fields: readonly FieldDescription[];
  readonly json_schema: Record<string, unknown>;
}

type AnyEntry = CatalogEntry | StreamingEntry;

const ALL_ENTRIES: readonly AnyEntry[] = [...CATALOG_ENTRIES, ...STREAMING_ENTRIES];

/** The JSON Schema of a payload as an emitter writes it (fields with defaults are optional). */
export function payloadJsonSchema(entry: AnyEntry): Record<string, unknown> {
  return z.toJSONSchema(entry.schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}

interface JsonSchemaNode {
  type?: string | string[];
  anyOf?: JsonSchemaNode[];
  enum?: unknown[];
  const?: unknown;
  items?: JsonSchemaNode;
  format?: string;
  properties?: Record<string, JsonSchemaNode>;
  required?: string[];
}

function typeLabel(node: JsonSchemaNode): string {
  if (node.enum) return node.enum.map((v) => JSON.stringify(v)).join(' | ');
  if (node.const !== undefined) return JSON.stringify(node.const);
  if (node.anyOf) return node.anyOf.map(typeLabel).join(' | ');
  if (node.type === 'array') return `${node.items ? typeLabel(node.items) : 'unknown'}[]`;
  if (node.format) return `${node.type ?? 'string'} (${node.format})`;
  if (Array.isArray(node.type)) return node.type.join(' | ');
  return node.type ?? 'unknown';
}

function fieldsOf(schema: JsonSchemaNode): FieldDescription[] {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {}).map(([name, node]) => {
    const label = typeLabel(node);
    return { name, type: label, required: required.has(name), nullable: /\bnull\b/.test(label) };
  });
}

function describe(entry: AnyEntry): TypeDescription {
  const jsonSchema = payloadJsonSchema(entry);
  const isCatalog = entry.family === 'catalog';
  return {
    type: entry.type,
    domain: entry.domain,
    family: entry.family,
    sensitivity: entry.sensitivity,
    actors: entry.actors,
    audit: isCatalog ? entry.audit : false,
    phase: isCatalog ? entry.phase : null,
    parent: isCatalog ? entry.parent : null,
    description: entry.description,
    dynamic_sensitivity: isCatalog && entry.resolveSensitivity !== undefined,
    fields: fieldsOf(jsonSchema as JsonSchemaNode),
    json_schema: jsonSchema,
  };
}

/**
 * The contract, optionally narrowed to a domain or one type.
 * @throws MetisError naming the unknown domain or type.
 */
export function describeEventTypes(options: { domain?: string; type?: string } = {}): TypeDescription[] {
  let entries = ALL_ENTRIES;
  if (options.domain !== undefined) {
    const domains = [...new Set(ALL_ENTRIES.map((e) => e.domain))];
    if (!domains.includes(options.domain)) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--domain: unknown domain "${options.domain}"; known domains: ${domains.join(', ')}`,
      );
    }
    entries = entries.filter((e) => e.domain === options.domain);
  }
  if (options.type !== undefined) {
    const wanted = options.type;
    entries = entries.filter((e) => e.type === wanted);
    const known = ALL_ENTRIES.find((e) => e.type === wanted);
    if (entries.length === 0 && known !== undefined) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--type: "${wanted}" is in domain ${known.domain}, not ${options.domain}; drop --domain or change it`,
      );
    }
    if (entries.length === 0) {
      const near = ALL_ENTRIES.filter((e) => e.type.split('.')[0] === wanted.split('.')[0]).map(
        (e) => e.type,
      );
      throw new MetisError(
        'METIS_ERR_UNKNOWN_EVENT_TYPE',
        `--type: unknown event type "${wanted}"${near.length ? ` (did you mean one of: ${near.join(', ')}?)` : ''}`,
      );
    }
  }
  return entries.map(describe);
}
