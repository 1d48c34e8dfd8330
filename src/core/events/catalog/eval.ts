import { z } from 'zod';
import { decimalString, defineEventType, nonNegativeInt, unitInterval } from '../define.js';

const SubjectKindSchema = z.enum(['turn', 'tool_cycle', 'session', 'workload']);
const JudgeKindSchema = z.enum(['heuristic', 'llm', 'hybrid']);

export const evalStarted = defineEventType({
  type: 'eval.started',
  domain: 'eval',
  schema: z.strictObject({
    eval_id: z.string().min(1),
    subject_kind: SubjectKindSchema,
    subject_id: z.string().min(1),
    rubric_id: z.string().min(1),
    rubric_version: z.string(),
    judge_kind_planned: JudgeKindSchema,
    trigger: z.enum(['bus', 'batch', 'feedback_arrived', 'benchmark']),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: false,
  parent: 'turn.completed / tool.completed / tool.failed / session.ended / feedback.explicit',
  description: 'The evaluator began scoring a subject; pairs with eval.completed or eval.failed.',
});

export const evalCompleted = defineEventType({
  type: 'eval.completed',
  domain: 'eval',
  schema: z.strictObject({
    eval_id: z.string().min(1),
    subject_kind: SubjectKindSchema,
    subject_id: z.string().min(1),
    score: unitInterval,
    confidence: unitInterval,
    judge_kind: JudgeKindSchema,
    judge_model: z.string().nullable(),
    judge_cost_usd: decimalString,
    judge_pricing_version: z.string().nullable(),
    judge_latency_ms: nonNegativeInt,
    rubric_id: z.string().min(1),
    rubric_version: z.string(),
    signals: z.record(z.string(), z.unknown()),
    parent_eval_id: z.string().nullable(),
  }),
  sensitivity: 'user_controlled',
  actors: ['system'],
  phase: '3',
  audit: false,
  parent: 'eval.started',
  description: 'The evaluator produced a verdict for a subject.',
  // The floor is the worst case: signals.rationale_redacted carries LLM text the user opted into
  // capturing. Without it the verdict is structural only, a move toward less private (§4.4.1).
  resolveSensitivity: (p) =>
    typeof p.signals.rationale_redacted === 'string' ? 'user_controlled' : 'pseudonymous',
});

export const evalFailed = defineEventType({
  type: 'eval.failed',
  domain: 'eval',
  schema: z.strictObject({
    eval_id: z.string().min(1),
    subject_kind: SubjectKindSchema,
    subject_id: z.string().min(1),
    failure_mode: z.enum([
      'judge_output_invalid',
      'judge_call_failed',
      'throttled_no_heuristic',
      'subject_not_found',
      'rubric_invalid',
    ]),
    error_message: z.string(),
    judge_latency_ms: nonNegativeInt,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: false,
  parent: 'eval.started',
  description: 'The judge could not produce a verdict.',
});

export const evalEvents = [evalStarted, evalCompleted, evalFailed];
