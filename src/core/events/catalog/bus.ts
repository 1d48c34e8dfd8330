import { z } from 'zod';
import { defineEventType, isoDatetime, nonNegativeInt } from '../define.js';

// Only subscriber lifecycle and gap detection are events; overflow and handler errors are logs (§6.10).

export const busSubscriberRegistered = defineEventType({
  type: 'bus.subscriber_registered',
  domain: 'bus',
  schema: z.strictObject({
    subscription_name: z.string().min(1),
    filter: z.record(z.string(), z.unknown()),
    fast_path: z.boolean(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'A subscriber attached to the bus.',
});

export const busSubscriberUnregistered = defineEventType({
  type: 'bus.subscriber_unregistered',
  domain: 'bus',
  schema: z.strictObject({
    subscription_name: z.string().min(1),
    reason: z.enum(['explicit', 'client_disconnect', 'shutdown', 'removed_after_errors']),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: 'A subscriber detached from the bus.',
});

export const busGapDetected = defineEventType({
  type: 'bus.gap_detected',
  domain: 'bus',
  schema: z.strictObject({
    session_id: z.string().min(1),
    gap_start_id: z.string().min(1),
    gap_end_id: z.string().min(1),
    estimated_missing_count: nonNegativeInt,
    detected_at: isoDatetime,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '1',
  audit: false,
  parent: 'none',
  description: "At startup the trace store found a hole in a session's persisted events.",
});

export const busEvents = [busSubscriberRegistered, busSubscriberUnregistered, busGapDetected];
