import { z } from 'zod';
import { defineEventType, nonNegativeInt } from '../define.js';

// Named by §7.6 without payloads; see docs/decisions.md. Identifiers only: the plaintext identity
// (email, name) stays in users.json (multi-user §3.3).

export const analyticsUserExported = defineEventType({
  type: 'analytics.user_exported',
  domain: 'analytics',
  schema: z.strictObject({
    user_id: z.string().min(1),
    exported_event_count: nonNegativeInt,
    format: z.enum(['jsonl', 'csv']),
    requested_by: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none',
  description: "An operator exported one user's trace events (data-subject access).",
});

export const analyticsUserForgotten = defineEventType({
  type: 'analytics.user_forgotten',
  domain: 'analytics',
  schema: z.strictObject({
    user_id: z.string().min(1),
    events_deleted: nonNegativeInt,
    requested_by: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none',
  description: "An operator deleted one user's trace events (right to be forgotten).",
});

export const analyticsEvents = [analyticsUserExported, analyticsUserForgotten];
