import { z } from 'zod';
import { defineEventType, isoDatetime, nonNegativeInt } from '../define.js';

export const traceSwept = defineEventType({
  type: 'trace.swept',
  domain: 'trace',
  schema: z.strictObject({
    rows_deleted: nonNegativeInt,
    rows_audit_exempt: nonNegativeInt,
    cutoff_timestamp: isoDatetime,
    oldest_kept_timestamp: isoDatetime.nullable(),
    // Always false in practice: a dry run returns its result without emitting (§6.14).
    dry_run: z.boolean(),
    swept_at: isoDatetime,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none (one-shot operator action)',
  description: 'A retention sweep deleted trace rows older than the cutoff; audit rows are exempt.',
});

export const traceEvents = [traceSwept];
