import fc from 'fast-check';

/**
 * The subset of JSON Schema that `z.toJSONSchema(schema, { io: 'input' })` produces for metis payloads.
 * Enough to generate valid payloads for property tests; anything else throws, so a new construct in the
 * catalog shows up as a test failure here rather than as silently weak generation.
 */
export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  propertyNames?: JsonSchema;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  pattern?: string;
  format?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  default?: unknown;
}

const MAX_ARRAY = 4;

function stringArbitrary(schema: JsonSchema): fc.Arbitrary<string> {
  if (schema.format === 'date-time') {
    return fc
      .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
      .map((d) => d.toISOString());
  }
  const minLength = schema.minLength ?? 0;
  if (schema.pattern !== undefined) {
    const maxLength = schema.maxLength ?? Number.POSITIVE_INFINITY;
    return fc
      .stringMatching(new RegExp(schema.pattern))
      .filter((s) => s.length >= minLength && s.length <= maxLength);
  }
  return fc.string({ minLength, maxLength: schema.maxLength ?? Math.max(minLength, 12) });
}

function numberArbitrary(schema: JsonSchema, integer: boolean): fc.Arbitrary<number> {
  const excludedMin = schema.exclusiveMinimum;
  const excludedMax = schema.exclusiveMaximum;
  const inRange = (n: number) =>
    (excludedMin === undefined || n > excludedMin) && (excludedMax === undefined || n < excludedMax);
  if (integer) {
    const min = Math.max(schema.minimum ?? Number.MIN_SAFE_INTEGER, Number.MIN_SAFE_INTEGER);
    const max = Math.min(schema.maximum ?? Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
    return fc.integer({ min: Math.ceil(min), max: Math.floor(max) }).filter(inRange);
  }
  return fc
    .double({
      noNaN: true,
      noDefaultInfinity: true,
      ...(schema.minimum !== undefined ? { min: schema.minimum } : {}),
      ...(schema.maximum !== undefined ? { max: schema.maximum } : {}),
    })
    .filter(inRange);
}

function objectArbitrary(schema: JsonSchema): fc.Arbitrary<Record<string, unknown>> {
  if (schema.properties !== undefined) {
    // Only declared properties are generated, strict or not: whether unknown keys are rejected is
    // something the tests check, not something the generator assumes.
    const required = new Set(schema.required ?? []);
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [key, node] of Object.entries(schema.properties)) model[key] = arbitraryFromSchema(node);
    // Keys outside `required` are the additive fields (they default to null): sometimes omitted.
    return fc.record(model, { requiredKeys: [...required], noNullPrototype: true });
  }
  // A record: arbitrary string keys, values per additionalProperties.
  const values =
    typeof schema.additionalProperties === 'object'
      ? arbitraryFromSchema(schema.additionalProperties)
      : fc.jsonValue();
  const keys = fc.string({ maxLength: 8 }).filter((k) => k !== '__proto__');
  return fc.dictionary(keys, values, { maxKeys: 4, noNullPrototype: true });
}

function isEmptySchema(schema: JsonSchema): boolean {
  return Object.keys(schema).filter((k) => k !== 'default' && k !== '$schema').length === 0;
}

/** An arbitrary of values valid against `schema`. */
export function arbitraryFromSchema(schema: JsonSchema): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum !== undefined) return fc.constantFrom(...schema.enum);
  const union = schema.anyOf ?? schema.oneOf;
  if (union !== undefined) return fc.oneof(...union.map(arbitraryFromSchema));
  if (Array.isArray(schema.type)) {
    return fc.oneof(...schema.type.map((type) => arbitraryFromSchema({ ...schema, type })));
  }
  if (isEmptySchema(schema)) return fc.jsonValue();
  switch (schema.type) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'string':
      return stringArbitrary(schema);
    case 'integer':
      return numberArbitrary(schema, true);
    case 'number':
      return numberArbitrary(schema, false);
    case 'array':
      return fc.array(schema.items ? arbitraryFromSchema(schema.items) : fc.jsonValue(), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? MAX_ARRAY, MAX_ARRAY)),
      });
    case 'object':
      return objectArbitrary(schema);
    default:
      throw new Error(`arbitraryFromSchema: unsupported schema ${JSON.stringify(schema)}`);
  }
}

/** The JSON types a schema node accepts (`integer` counts as `number`); empty when it accepts anything. */
export function acceptedJsonTypes(schema: JsonSchema): Set<string> {
  const types = new Set<string>();
  const add = (type: string) => types.add(type === 'integer' ? 'number' : type);
  const union = schema.anyOf ?? schema.oneOf;
  if (union !== undefined) {
    for (const node of union) for (const type of acceptedJsonTypes(node)) add(type);
    return types;
  }
  if (schema.enum !== undefined || schema.const !== undefined) {
    for (const value of schema.enum ?? [schema.const]) add(jsonTypeOf(value));
    return types;
  }
  if (Array.isArray(schema.type)) for (const type of schema.type) add(type);
  else if (schema.type !== undefined) add(schema.type);
  return types;
}

export function jsonTypeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

const WRONG_VALUES: readonly unknown[] = [{ wrong: true }, 'wrong', 42, true, ['wrong']];

/** A value whose JSON type the schema does not accept at all, or undefined if it accepts every type. */
export function wrongTypeValue(schema: JsonSchema): unknown {
  const accepted = acceptedJsonTypes(schema);
  if (accepted.size === 0) return undefined;
  return WRONG_VALUES.find((value) => !accepted.has(jsonTypeOf(value)));
}
