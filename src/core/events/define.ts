import { z } from 'zod';
import type { Actor, Sensitivity } from './envelope.js';

/**
 * One entry of the closed catalog (bus spec §6): everything a reader needs to know about one event
 * type, in one place. Types, `metis catalog`, presets and the JSON Schema snapshot derive from these.
 */
export interface CatalogEntry<S extends z.ZodType = z.ZodType, T extends string = string> {
  /** The type's name, kept as its literal so emitters are checked against it (catalog/index.ts). */
  readonly type: T;
  /** The spec section the type belongs to (`routing.*` is in the route domain, `route.overridden` in pattern). */
  readonly domain: string;
  readonly family: 'catalog';
  readonly schema: S;
  /** The most private recording of this type (§4.4); the default when no opt-in field is populated. */
  readonly sensitivity: Sensitivity;
  /** Typical actors; the first is the default when `emit` is given none. */
  readonly actors: readonly [Actor, ...Actor[]];
  readonly phase: string;
  /** Audit-flagged types survive every retention sweep (§7.3, §7.6). */
  readonly audit: boolean;
  /** The typical parent type, as the spec words it. */
  readonly parent: string;
  readonly description: string;
  /**
   * Dynamic sensitivity (§4.4.1): given a valid payload, the class to record. Returns the floor when no
   * opt-in field is populated; may only return a class that is less private than the floor.
   */
  readonly resolveSensitivity?: (payload: z.output<S>) => Sensitivity;
}

export function defineEventType<const T extends string, S extends z.ZodType>(
  entry: Omit<CatalogEntry<S, T>, 'family'>,
): CatalogEntry<S, T> {
  return { ...entry, family: 'catalog' };
}

// Field helpers shared by the domain files, so a reader sees the spec's vocabulary.

/** A field the spec marks as additive: nullable and defaulting to null, so older emitters may omit it. */
export function additive<T extends z.ZodType>(schema: T) {
  return schema.nullable().default(null);
}

/** Decimal values serialized as strings (canonical-message-format §6.4), e.g. `"0.0123"`. */
export const decimalString = z
  .string()
  .regex(/^-?\d+(\.\d+)?$/, 'must be a decimal number written as a string');

/** Timestamps inside payloads: ISO 8601 UTC. */
export const isoDatetime = z.iso.datetime({ offset: true });

export const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex SHA-256');

export const nonNegativeInt = z.number().int().nonnegative();
export const nonNegativeNumber = z.number().nonnegative();
export const unitInterval = z.number().min(0).max(1);

export const StopReasonSchema = z.enum(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use']);

/**
 * A streaming-only type (streaming spec §5.3): live deltas from the agent loop to clients, never on the
 * bus and never persisted.
 */
export interface StreamingEntry<S extends z.ZodType = z.ZodType> {
  readonly type: string;
  readonly domain: 'message' | 'text' | 'thinking' | 'tool';
  readonly family: 'streaming';
  readonly schema: S;
  readonly sensitivity: Sensitivity;
  readonly actors: readonly [Actor, ...Actor[]];
  readonly description: string;
}

export function defineStreamingType<S extends z.ZodType>(
  entry: Omit<StreamingEntry<S>, 'family'>,
): StreamingEntry<S> {
  return { ...entry, family: 'streaming' };
}
