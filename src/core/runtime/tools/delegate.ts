import { z } from 'zod';
import { boundedSummary } from './summary-bound.js';
import { defineTool, type ToolContext, type ToolOutput } from './tool.js';

export const DelegateInputSchema = z.strictObject({
  task: z.string().min(1),
  tier: z.enum(['fast', 'balanced', 'deep']).default('fast'),
  context_mode: z.enum(['minimal', 'explicit']).default('minimal'),
  context_references: z.array(z.string()).default([]),
  /** Tools the planner wants the worker to keep; omitted means all the worker may have. */
  allowed_tools: z.array(z.string()).nullable().default(null),
});

export type DelegateInput = z.output<typeof DelegateInputSchema>;

/** Tools a worker never gets: recursive delegation is out of scope (bus §6.8); memory and skills are its planner's. */
export const WORKER_FORBIDDEN_TOOLS: ReadonlySet<string> = new Set([
  'delegate',
  'memory',
  'skill_load',
  'skill_search',
]);

/** Runs a worker session for a delegated task and returns its answer; supplied by the runtime. */
export type RunDelegation = (input: DelegateInput, context: ToolContext) => Promise<ToolOutput>;

/** The `delegate` built-in: hands a sub-task to a worker session (bus §6.8, streaming §7). */
export function createDelegateTool(run: RunDelegation) {
  return defineTool({
    name: 'delegate',
    description: 'Hand a self-contained sub-task to a worker agent and get its answer back.',
    inputSchema: DelegateInputSchema,
    sideEffects: 'none',
    summarize: (input) => ({ input_summary: boundedSummary(`delegate (${input.tier}): ${input.task}`) }),
    execute: (input, context) => run(input, context),
  });
}
