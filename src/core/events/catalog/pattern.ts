import { z } from 'zod';
import {
  decimalString,
  defineEventType,
  nonNegativeInt,
  nonNegativeNumber,
  unitInterval,
} from '../define.js';

// The pattern domain (bus spec §6.5b) also holds route.overridden: user actions on pattern advice.

const FingerprintKindSchema = z.enum(['structural', 'hybrid']);

export const routeOverridden = defineEventType({
  type: 'route.overridden',
  domain: 'pattern',
  schema: z.strictObject({
    original_chosen_model: z.string().min(1),
    new_chosen_model: z.string().min(1),
    deferred_policy: z.string().min(1),
    rule_name: z.string().nullable(),
    pattern_confidence: unitInterval,
  }),
  sensitivity: 'pseudonymous',
  actors: ['user'],
  phase: '3',
  audit: false,
  parent: 'route.decided (the decision being overridden)',
  description: 'The user applied a deferred pattern recommendation over the routing decision.',
});

export const patternOverrideDismissed = defineEventType({
  type: 'pattern.override_dismissed',
  domain: 'pattern',
  schema: z.strictObject({
    chosen_model: z.string().min(1),
    dismissed_pattern_model: z.string().min(1),
    rule_name: z.string().nullable(),
    pattern_confidence: unitInterval,
  }),
  sensitivity: 'pseudonymous',
  actors: ['user'],
  phase: '3',
  audit: false,
  parent: 'route.decided',
  description: 'The user dismissed a pattern-disagreement suggestion; the turn keeps its model.',
});

export const patternRecorded = defineEventType({
  type: 'pattern.recorded',
  domain: 'pattern',
  schema: z.strictObject({
    fingerprint_id: z.string().min(1),
    fingerprint_kind: FingerprintKindSchema,
    primary_model: z.string().min(1),
    sample_size_before: nonNegativeInt,
    sample_size_after: nonNegativeInt,
    was_new_fingerprint: z.boolean(),
    success_score: unitInterval.nullable(),
    cost_usd_at_record: decimalString,
    pricing_version: z.string(),
    over_soft_cap: z.boolean(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2.5',
  audit: false,
  parent: 'session.ended',
  description: "A session's outcome was written to the pattern store, one per (fingerprint, model).",
});

export const patternMatched = defineEventType({
  type: 'pattern.matched',
  domain: 'pattern',
  schema: z.strictObject({
    fingerprint_id: z.string().min(1),
    fingerprint_kind: FingerprintKindSchema,
    chosen_model: z.string().min(1),
    confidence: unitInterval,
    sample_size: nonNegativeInt,
    k_cluster_size: nonNegativeInt,
    alternatives_count: nonNegativeInt,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2.5',
  audit: false,
  parent: 'route.decided',
  description: 'The pattern policy won routing for the turn.',
});

export const patternEvicted = defineEventType({
  type: 'pattern.evicted',
  domain: 'pattern',
  schema: z.strictObject({
    trigger: z.enum(['soft_cap_signal', 'hard_cap_evict', 'age_trim', 'manual_clear']),
    fingerprints_before: nonNegativeInt,
    fingerprints_after: nonNegativeInt,
    outcomes_before: nonNegativeInt,
    outcomes_after: nonNegativeInt,
    entries_evicted: nonNegativeInt,
    oldest_evicted_age_days: nonNegativeNumber.nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2.5',
  audit: true,
  parent: 'pattern.recorded (cap-triggered) or none (manual or scheduled trim)',
  description: 'The pattern store crossed a cap or was trimmed; counts and ages only.',
});

export const patternEvents = [
  routeOverridden,
  patternOverrideDismissed,
  patternRecorded,
  patternMatched,
  patternEvicted,
];
