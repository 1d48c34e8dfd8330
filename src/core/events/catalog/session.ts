import { z } from 'zod';
import { defineEventType, nonNegativeInt, nonNegativeNumber, sha256Hex } from '../define.js';

export const sessionCreated = defineEventType({
  type: 'session.created',
  domain: 'session',
  schema: z.strictObject({
    workspace_path: z.string().min(1),
    workspace_hash: sha256Hex,
    initial_active_model: z.string().nullable(),
    routing_policy_version: z.string().min(1),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'A session was created for a workspace.',
});

export const sessionResumed = defineEventType({
  type: 'session.resumed',
  domain: 'session',
  schema: z.strictObject({
    workspace_hash: sha256Hex,
    last_event_id_at_resume: z.string().nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'An existing session was resumed.',
});

export const sessionEnded = defineEventType({
  type: 'session.ended',
  domain: 'session',
  schema: z.strictObject({
    disposition: z.enum(['completed', 'abandoned', 'error']),
    turn_count: nonNegativeInt,
    total_cost_usd: nonNegativeNumber,
    duration_seconds: nonNegativeNumber,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'A session ended: completed, abandoned after the inactivity timeout, or failed.',
});

export const sessionEvents = [sessionCreated, sessionResumed, sessionEnded];
