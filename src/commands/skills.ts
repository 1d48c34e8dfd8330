import { resolve } from 'node:path';
import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { tokensOf } from '../core/runtime/skills/skill-file.js';
import { findSkill, globalSkillsDir, readLibrary, skillRoots } from '../core/runtime/skills/skill-library.js';

export interface SkillsOptions {
  workspace?: string;
  config?: string;
  json?: boolean;
}

async function rootsOf(options: SkillsOptions) {
  const workspace = resolve(options.workspace ?? process.cwd());
  const { config } = await loadConfig({ explicitPath: options.config ?? null });
  const roots = skillRoots(workspace, globalSkillsDir(config.runtime.skills.global_dir));
  return { workspace, roots, budget: config.runtime.skills.budget_tokens };
}

/**
 * `metis skills list`: the skills a session of the workspace gets (the workspace's over the global
 * ones), read here, no server needed. A malformed SKILL.md is named on stderr and the exit code is 2.
 */
export async function skillsListCommand(options: SkillsOptions): Promise<void> {
  const { roots, budget } = await rootsOf(options);
  const library = await readLibrary(roots);
  const skills = [...library.skills.values()].map((skill) => ({
    name: skill.name,
    description: skill.description,
    load: skill.load,
    source: skill.source,
    version: skill.version,
    size_tokens: tokensOf(skill.body),
    path: skill.path,
  }));
  const shadowed = library.shadowed.map((skill) => skill.path);
  if (options.json) {
    console.log(
      JSON.stringify({ roots, budget_tokens: budget, skills, shadowed, problems: library.problems }),
    );
  } else if (skills.length === 0) {
    console.log(`No skills in ${roots.workspace} or ${roots.global}.`);
  } else {
    for (const s of skills) {
      console.log(
        `${s.name}  ${s.load}  ${s.source}  ${s.size_tokens} tokens\n  ${s.description}\n  ${s.path}`,
      );
    }
    for (const path of shadowed) console.log(`(hidden by the workspace's skill of the same name: ${path})`);
  }
  if (library.problems.length > 0) {
    const first = library.problems[0]!;
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      library.problems.map((problem) => problem.message).join('\n'),
      { hint: `Fix ${first.path} (see docs/skills.md), or remove its folder.` },
    );
  }
}

/** `metis skills show <name>`: one skill, the file that serves it, and its body. */
export async function skillsShowCommand(name: string, options: SkillsOptions): Promise<void> {
  const { roots } = await rootsOf(options);
  const skill = await findSkill(roots, name);
  const size = tokensOf(skill.body);
  if (options.json) {
    const { text: _text, ...rest } = skill;
    console.log(JSON.stringify({ ...rest, size_tokens: size }));
    return;
  }
  console.log(
    [
      `${skill.name}  (${skill.load}, ${skill.source}, ${size} tokens, ${skill.version})`,
      skill.path,
      skill.description,
      '',
      skill.body,
    ].join('\n'),
  );
}
