import { z } from 'zod';
import { defineEventType, unitInterval } from '../define.js';

export const feedbackExplicit = defineEventType({
  type: 'feedback.explicit',
  domain: 'feedback',
  schema: z.strictObject({
    scope: z.enum(['turn', 'session']),
    rating: z.enum(['thumbs_up', 'thumbs_down']),
    comment: z.string().nullable(),
    subject_turn_id: z.string().nullable(),
    subject_session_id: z.string().nullable(),
  }),
  sensitivity: 'aggregatable',
  actors: ['user'],
  phase: '2',
  audit: false,
  parent: 'turn.completed or session.ended',
  description: 'The user rated a turn or a session.',
});

export const feedbackImplicit = defineEventType({
  type: 'feedback.implicit',
  domain: 'feedback',
  schema: z.strictObject({
    type: z.enum(['retry', 'manual_swap', 'edit_followup', 'abandon', 'accept']),
    confidence: unitInterval,
    subject_turn_id: z.string().nullable(),
    context: z.record(z.string(), z.unknown()),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2',
  audit: false,
  parent: 'varies',
  description: 'A heuristic detected a feedback signal such as a retry or a model swap.',
});

export const feedbackEvents = [feedbackExplicit, feedbackImplicit];
