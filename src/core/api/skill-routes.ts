import { isAbsolute } from 'node:path';
import { z } from 'zod';
import type { EventBus } from '../bus/event-bus.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import { globalSkillsDir, skillRoots } from '../runtime/skills/skill-library.js';
import { type SkillWriteResult, SkillWriter } from '../runtime/skills/skill-writer.js';

const common = {
  workspace_path: z
    .string()
    .min(1)
    .refine(isAbsolute, 'must be an absolute path')
    .describe('the workspace whose .metis/skills/<name>/SKILL.md is written (unless global)'),
  name: z.string().min(1).describe("the skill's name: its folder's name and the front matter's `name`"),
  global: z
    .boolean()
    .default(false)
    .describe(
      "write into the server's global skills folder ($METIS_HOME/skills or runtime.skills.global_dir)",
    ),
  load: z.enum(['always', 'on_demand']).optional().describe('when the skill reaches the context'),
  force: z.boolean().default(false).describe('write even when the security scan blocks the text'),
};

const SkillCreateBody = z.strictObject({
  ...common,
  description: z.string().min(1).describe('one line: what the skill is for'),
  body: z.string().min(1).describe('the instructions that go into the context'),
});

const SkillEditBody = z.strictObject({
  ...common,
  description: z.string().min(1).optional().describe('the new description; default: unchanged'),
  body: z.string().min(1).optional().describe('the new body; default: unchanged'),
  reason: z.string().optional().describe("why it changed (skill.modified's reason)"),
});

const Finding = z.object({
  line: z.int().positive(),
  rule: z.string(),
  severity: z.enum(['block', 'warning']),
  reason: z.string(),
  excerpt: z.string(),
});

const SkillWritten = z.object({
  name: z.string(),
  path: z.string().describe('the SKILL.md written'),
  source: z.enum(['global', 'workspace']),
  changed: z.boolean().describe('false when an edit left the file as it was (no event)'),
  size_tokens: z.int().nonnegative(),
  scan: z.object({ result: z.enum(['clean', 'warning', 'blocked']), findings: z.array(Finding) }),
  before_hash: z.string().nullable(),
  after_hash: z.string(),
  diff_size_bytes: z.int().nonnegative().nullable(),
  event_id: z.string().nullable().describe('the skill.created or skill.modified recorded'),
});

type Written = z.infer<typeof SkillWritten>;
const answer = (result: SkillWriteResult): Written => ({
  ...result,
  scan: { result: result.scan.result, findings: [...result.scan.findings] },
});

/**
 * `POST /skills/create` and `POST /skills/edit` (`metis skills create|edit`): the server writes the
 * SKILL.md and records `skill.created` / `skill.modified` (actor user, system session), so a manual
 * change reaches the trace like every other event, and the global folder is the one its sessions read.
 */
export function skillRoutes(bus: EventBus, configuredGlobalDir: string | null): JsonRoute[] {
  const globalDir = globalSkillsDir(configuredGlobalDir);
  const writer = (workspace: string) => new SkillWriter(bus, skillRoots(workspace, globalDir));
  const errors = ['METIS_ERR_INVALID_ARGUMENT'] as const;
  return [
    jsonRoute(
      {
        method: 'POST',
        path: '/skills/create',
        summary: 'Write a new skill (skill.created, after a security scan)',
        body: SkillCreateBody,
        success: { status: 201, description: 'the skill written and its scan', schema: SkillWritten },
        errors: [...errors],
      },
      async ({ body }) => [201, answer(await writer(body.workspace_path).create(body))],
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/skills/edit',
        summary: 'Change a skill (skill.modified, after a security scan)',
        body: SkillEditBody,
        success: { status: 200, description: 'the skill written and its scan', schema: SkillWritten },
        errors: [...errors],
      },
      async ({ body }) => [200, answer(await writer(body.workspace_path).edit(body))],
    ),
  ];
}
