import { z } from 'zod';
import type { SkillSessions } from '../skills/skill-sessions.js';
import { boundedSummary } from './summary-bound.js';
import { defineTool, type Tool, type ToolContext } from './tool.js';

export interface SkillToolsOptions {
  readonly skills: SkillSessions;
}

const loadSchema = z.strictObject({
  name: z
    .string()
    .min(1)
    .describe('The skill to load: its name, as the system prompt or skill_search gives it.'),
});

const searchSchema = z.strictObject({
  query: z
    .string()
    .min(1)
    .describe('What the task is about, in a few words; matched against skill names and descriptions.'),
});

function callContext(context: ToolContext) {
  return {
    sessionId: context.sessionId,
    turnId: context.turnId,
    toolUseId: context.toolUseId,
    workspacePath: context.workspacePath,
    callCompletedEventId: context.callCompletedEventId,
  };
}

/**
 * `skill_load` and `skill_search`: the skills of `$METIS_HOME/skills` and `<workspace>/.metis/skills`
 * (the workspace's wins), loaded on demand against the session's skill budget (skill-sessions.ts).
 */
export function createSkillTools(options: SkillToolsOptions): Tool[] {
  const { skills } = options;
  const load = defineTool({
    name: 'skill_load',
    description:
      'Loads a skill (instructions for a kind of task) into your context. Load one when the task matches its description; each load counts against a token budget for the session.',
    inputSchema: loadSchema,
    sideEffects: 'read',
    summarize: (input) => ({ input_summary: boundedSummary(`load skill ${input.name}`) }),
    async execute(input, context) {
      const { skill, tokens, again } = await skills.load(input.name.trim(), callContext(context));
      const head = again
        ? `Skill ${skill.name} was already loaded in this session; here it is again.`
        : `Skill ${skill.name} loaded (${tokens} tokens, ${skill.source}: ${skill.path}).`;
      return { content: `${head}\n\n${skill.body}` };
    },
  });
  const search = defineTool({
    name: 'skill_search',
    description:
      'Searches the skills by name and description; returns the best matches (name and description). Load one with skill_load.',
    inputSchema: searchSchema,
    sideEffects: 'read',
    summarize: (input) => ({ input_summary: boundedSummary(`search skills: ${input.query}`) }),
    async execute(input, context) {
      const { results, problems } = await skills.search(input.query, callContext(context));
      const lines =
        results.length === 0
          ? [`No skill matches ${JSON.stringify(input.query)}.`]
          : [
              `${results.length} skill${results.length === 1 ? '' : 's'} match:`,
              ...results.map((skill) => `- ${skill.name}: ${skill.description}`),
            ];
      const notes = problems.map((problem) => `Left out: ${problem}`);
      return { content: [...lines, ...notes].join('\n') };
    },
  });
  return [load, search];
}
