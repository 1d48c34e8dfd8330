import { z } from 'zod';

/** Who caused an event (bus spec §4.1). */
export const ActorSchema = z.enum(['user', 'agent', 'system', 'tool', 'worker']);
export type Actor = z.infer<typeof ActorSchema>;
export const ACTORS: readonly Actor[] = ActorSchema.options;

/**
 * Data classification, most private first (bus spec §4.4). The order matters: "more private" means
 * a lower rank, and sensitivity may only move toward less private (§4.4.1).
 */
export const SensitivitySchema = z.enum(['private', 'user_controlled', 'pseudonymous', 'aggregatable']);
export type Sensitivity = z.infer<typeof SensitivitySchema>;
export const SENSITIVITIES: readonly Sensitivity[] = SensitivitySchema.options;

export function sensitivityRank(sensitivity: Sensitivity): number {
  return SENSITIVITIES.indexOf(sensitivity);
}

/** True when `a` is strictly more private than `b`. */
export function isMorePrivate(a: Sensitivity, b: Sensitivity): boolean {
  return sensitivityRank(a) < sensitivityRank(b);
}

/** Session id used for process-level events such as `bus.subscriber_registered` and `trace.swept`. */
export const SYSTEM_SESSION_ID = 'system';

/**
 * The envelope every event carries on the bus, in the store and on the wire (bus spec §4.1), plus
 * `seq`: a per-session counter with no holes, so that a gap in persisted events is visible (DESIGN.md
 * invariant 4). Streaming-only events are never persisted and carry `seq: null`.
 */
export interface MetisEvent<P = Record<string, unknown>> {
  readonly id: string;
  /** ISO 8601 UTC with microseconds, e.g. `2026-11-22T07:37:03.123456Z`. */
  readonly timestamp: string;
  readonly session_id: string;
  readonly turn_id: string | null;
  readonly parent_event_id: string | null;
  readonly type: string;
  readonly actor: Actor;
  readonly payload: P;
  readonly sensitivity: Sensitivity;
  readonly seq: number | null;
}

export const EventIdSchema = z
  .string()
  .regex(/^evt_[0-9A-HJKMNP-TV-Z]{26}$/, 'must be evt_ followed by a ULID');

/** Validates a whole envelope read from outside (a JSONL export, a recorded trace). */
export const EnvelopeSchema = z.object({
  id: EventIdSchema,
  timestamp: z.string(),
  session_id: z.string().min(1),
  turn_id: z.string().nullable(),
  parent_event_id: z.string().nullable(),
  type: z.string().min(1),
  actor: ActorSchema,
  payload: z.record(z.string(), z.unknown()),
  sensitivity: SensitivitySchema,
  seq: z.number().int().positive().nullable(),
});
