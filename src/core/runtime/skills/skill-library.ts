import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MetisError } from '../../errors.js';
import { metisHome } from '../../store/paths.js';
import {
  parseSkill,
  SKILL_FILE,
  SKILL_NAME,
  type Skill,
  type SkillSource,
  skillFileError,
} from './skill-file.js';

/** The folder of a workspace that holds its skills. */
export const WORKSPACE_SKILLS_DIR = join('.metis', 'skills');

/** Where skills are looked for: the workspace's folder wins over the global one. */
export interface SkillRoots {
  readonly workspace: string;
  readonly global: string;
}

/** The global folder: `runtime.skills.global_dir` when set, else `$METIS_HOME/skills`. */
export function globalSkillsDir(
  configured: string | null | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string {
  return configured ?? join(metisHome(env), 'skills');
}

export function skillRoots(workspacePath: string, globalDir: string): SkillRoots {
  return { workspace: join(workspacePath, WORKSPACE_SKILLS_DIR), global: globalDir };
}

/** A SKILL.md that could not be used: its path and why. */
export interface SkillProblem {
  readonly path: string;
  readonly message: string;
}

/** What a library holds: usable skills by name (workspace over global), and the files that are not. */
export interface SkillLibrary {
  readonly skills: ReadonlyMap<string, Skill>;
  /** Global skills a workspace skill of the same name hides. */
  readonly shadowed: readonly Skill[];
  readonly problems: readonly SkillProblem[];
}

async function folders(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { withFileTypes: true });
    return entries
      .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.'))
      .map((entry) => entry.name)
      .sort();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `skills folder ${dir} cannot be read (${(error as Error).message})`,
    );
  }
}

/** Reads `<dir>/<folder>/SKILL.md`: null when there is none; an error naming it when it is not usable. */
export async function readSkill(dir: string, folder: string, source: SkillSource): Promise<Skill | null> {
  const path = join(dir, folder, SKILL_FILE);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw skillFileError(path, `cannot be read (${(error as Error).message})`);
  }
  return parseSkill(text, path, folder, source);
}

async function readDir(dir: string, source: SkillSource, problems: SkillProblem[]): Promise<Skill[]> {
  const skills: Skill[] = [];
  for (const folder of await folders(dir)) {
    try {
      const skill = await readSkill(dir, folder, source);
      if (skill !== null) skills.push(skill);
    } catch (error) {
      problems.push({ path: join(dir, folder, SKILL_FILE), message: (error as Error).message });
    }
  }
  return skills;
}

/**
 * Every skill of both folders. A workspace skill hides the global one of the same name (even when
 * the workspace's file is malformed: then the name has no skill and the problem says why).
 */
export async function readLibrary(roots: SkillRoots): Promise<SkillLibrary> {
  const problems: SkillProblem[] = [];
  const workspace = await readDir(roots.workspace, 'workspace', problems);
  const hiddenNames = new Set([...workspace.map((s) => s.name), ...(await folders(roots.workspace))]);
  const global = await readDir(roots.global, 'global', problems);
  const skills = new Map<string, Skill>();
  for (const skill of global) if (!hiddenNames.has(skill.name)) skills.set(skill.name, skill);
  for (const skill of workspace) skills.set(skill.name, skill);
  const shadowed = global.filter((skill) => hiddenNames.has(skill.name));
  const sorted = new Map([...skills.entries()].sort(([a], [b]) => a.localeCompare(b)));
  return { skills: sorted, shadowed, problems };
}

/**
 * One skill by name: the workspace's when it has one, else the global one. A missing skill is a
 * {@link SkillNotFoundError} naming both places looked in; a malformed SKILL.md, an error naming it.
 */
export async function findSkill(roots: SkillRoots, name: string): Promise<Skill> {
  if (!SKILL_NAME.test(name)) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `"${name}" is not a skill name (lowercase letters, digits, "-", "_", ".")`,
    );
  }
  const skill =
    (await readSkill(roots.workspace, name, 'workspace')) ?? (await readSkill(roots.global, name, 'global'));
  if (skill === null) {
    throw new SkillNotFoundError(
      `no skill "${name}": neither ${join(roots.workspace, name, SKILL_FILE)} nor ${join(roots.global, name, SKILL_FILE)} exists`,
      { hint: '`metis skills list` shows the skills there are.' },
    );
  }
  return skill;
}

/** No skill of that name in either folder (the tool reports it as `not_found`). */
export class SkillNotFoundError extends MetisError {
  constructor(message: string, options: { hint: string }) {
    super('METIS_ERR_INVALID_ARGUMENT', message, options);
  }
}

function words(text: string): string[] {
  return text
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((word) => word.length > 1);
}

/**
 * The skills whose name or description share words with the query, best first: each query word found
 * in the name counts 2, in the description 1 (a prefix match of at least 4 letters counts too).
 */
export function searchSkills(skills: Iterable<Skill>, query: string, limit = 5): Skill[] {
  const terms = [...new Set(words(query))];
  const hit = (term: string, candidates: readonly string[]) =>
    candidates.some(
      (word) =>
        word === term ||
        (term.length >= 4 && (word.startsWith(term) || (term.startsWith(word) && word.length >= 4))),
    );
  const scored: { skill: Skill; score: number }[] = [];
  for (const skill of skills) {
    const name = words(skill.name);
    const description = words(skill.description);
    let score = 0;
    for (const term of terms) score += (hit(term, name) ? 2 : 0) + (hit(term, description) ? 1 : 0);
    if (score > 0) scored.push({ skill, score });
  }
  scored.sort((a, b) => b.score - a.score || a.skill.name.localeCompare(b.skill.name));
  return scored.slice(0, limit).map((entry) => entry.skill);
}
