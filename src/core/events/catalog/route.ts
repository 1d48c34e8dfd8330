import { z } from 'zod';
import { defineEventType, nonNegativeInt, nonNegativeNumber, unitInterval } from '../define.js';

// The route domain (bus spec §6.5) holds route.decided and the routing.* types.

/** The router's policies, in the order it asks them (routing-engine §7): the catalog's one spelling. */
export const ROUTING_POLICIES = [
  'per_message_override',
  'manual_sticky',
  'rule',
  'pattern',
  'delegate_request',
  'workspace_default',
  'global_default',
] as const;

export type RoutingPolicy = (typeof ROUTING_POLICIES)[number];

/** What one policy said of a turn's model. */
export const ROUTE_VERDICTS = ['not_applicable', 'deferred', 'rejected', 'chose'] as const;

export type Verdict = (typeof ROUTE_VERDICTS)[number];

const RoutingScopeSchema = z.enum(['model_specific', 'provider_wide']);

/** One policy's verdict in route.decided.chain, in chain order (routing-engine §7). */
const RouteChainEntrySchema = z.strictObject({
  policy: z.enum(ROUTING_POLICIES),
  verdict: z.enum(ROUTE_VERDICTS),
  candidate_model: z.string().nullable(),
  reason: z.string(),
  rule_name: z.string().nullable(),
  confidence: unitInterval.nullable(),
  pattern_alternatives: z
    .array(z.strictObject({ model: z.string().min(1), score: z.number(), sample_size: nonNegativeInt }))
    .nullable(),
  validation_failure: z
    .enum([
      'no_vision_support',
      'exceeds_context_window',
      'no_tool_support',
      'no_system_prompt_support',
      'no_structured_output_support',
      'provider_unavailable',
      'not_configured',
    ])
    .nullable(),
});

export const routeDecided = defineEventType({
  type: 'route.decided',
  domain: 'route',
  schema: z.strictObject({
    chosen_model: z.string().min(1),
    winner_index: nonNegativeInt,
    elapsed_ms: nonNegativeNumber,
    chain: z.array(RouteChainEntrySchema),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'turn.started',
  description: 'The routing engine chose the model for a turn; exactly one per turn.',
});

export const routingPolicyInvalid = defineEventType({
  type: 'routing.policy_invalid',
  domain: 'route',
  schema: z.strictObject({
    policy_path: z.string().min(1),
    errors: z.array(z.string()),
    using_last_known_good: z.boolean(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: true,
  parent: 'none',
  description: 'The routing policy file failed to load.',
});

export const routingProviderUnavailable = defineEventType({
  type: 'routing.provider_unavailable',
  domain: 'route',
  schema: z.strictObject({
    provider: z.string().min(1),
    scope: RoutingScopeSchema,
    models_affected: z.array(z.string()),
    // Typed `str` in the spec; known values: 5_consecutive_failures, auth_error, dns_error,
    // multi_model_failures.
    trigger_reason: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'llm.call_failed (the failure that crossed the threshold)',
  description: 'A provider or model crossed the failure threshold; routing now rejects it.',
});

export const routingProviderRecovered = defineEventType({
  type: 'routing.provider_recovered',
  domain: 'route',
  schema: z.strictObject({
    provider: z.string().min(1),
    scope: RoutingScopeSchema,
    models_recovered: z.array(z.string()),
    downtime_seconds: nonNegativeNumber,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'A provider or model marked unavailable became routable again.',
});

export const routeEvents = [
  routeDecided,
  routingPolicyInvalid,
  routingProviderUnavailable,
  routingProviderRecovered,
];
