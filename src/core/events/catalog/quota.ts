import { z } from 'zod';
import { decimalString, defineEventType, nonNegativeNumber } from '../define.js';

// Named by §7.6 without a payload; see docs/decisions.md.
export const quotaAlert = defineEventType({
  type: 'quota.alert',
  domain: 'quota',
  schema: z.strictObject({
    scope: z.enum(['daily', 'monthly']),
    threshold_pct: nonNegativeNumber,
    spent_usd: decimalString,
    cap_usd: decimalString,
    gateway_key_id: z.string().nullable(),
    user_id: z.string().nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none',
  description: 'Spend crossed an alert threshold of a daily or monthly cap.',
});

export const quotaEvents = [quotaAlert];
