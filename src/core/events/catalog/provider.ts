import { z } from 'zod';
import { defineEventType, nonNegativeInt } from '../define.js';

export const providerDegraded = defineEventType({
  type: 'provider.degraded',
  domain: 'provider',
  schema: z.strictObject({
    provider: z.string().min(1),
    recent_failure_count: nonNegativeInt,
    window_seconds: nonNegativeInt,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2',
  audit: false,
  parent: 'llm.call_failed',
  description: 'A provider is failing often (soft state; routing.provider_unavailable is the hard one).',
});

export const providerEvents = [providerDegraded];
