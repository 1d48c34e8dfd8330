import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { SKILL_FILE, SKILL_NAME } from '../core/runtime/skills/skill-file.js';
import { globalSkillsDir, skillRoots } from '../core/runtime/skills/skill-library.js';
import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface SkillWriteOptions {
  workspace?: string;
  description?: string;
  body?: string;
  bodyFile?: string;
  global?: boolean;
  always?: boolean;
  onDemand?: boolean;
  reason?: string;
  force?: boolean;
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * The body from --body, --body-file (`-`: standard input), or, in a terminal with $VISUAL or $EDITOR
 * set, from the editor opened on `start`; undefined when none of them gives one.
 */
async function bodyOf(options: SkillWriteOptions, start: () => Promise<string>): Promise<string | undefined> {
  if (options.body !== undefined && options.bodyFile !== undefined) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', '--body and --body-file cannot both be given');
  }
  if (options.body !== undefined) return options.body;
  if (options.bodyFile === '-') return readStdin();
  if (options.bodyFile !== undefined) {
    try {
      return await readFile(options.bodyFile, 'utf8');
    } catch (error) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--body-file ${options.bodyFile} cannot be read (${(error as Error).message})`,
      );
    }
  }
  const editor = process.env.VISUAL || process.env.EDITOR;
  if (!process.stdin.isTTY || !process.stdout.isTTY || !editor) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'metis-skill-'));
  const file = join(dir, 'SKILL-body.md');
  try {
    writeFileSync(file, await start(), { mode: 0o600 });
    // The editor is the user's own command line ("code --wait"): a shell splits it.
    const ran = spawnSync(`${editor} "${file}"`, { stdio: 'inherit', shell: true });
    if (ran.status !== 0) {
      throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `the editor (${editor}) exited with ${ran.status}`);
    }
    return readFileSync(file, 'utf8');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Checked here as well as by the server, so a typo fails before the editor opens or a server is needed. */
function checkName(name: string): void {
  if (!SKILL_NAME.test(name)) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `"${name}" is not a skill name (lowercase letters, digits, "-", "_", "."; at most 64)`,
    );
  }
}

function loadOf(options: SkillWriteOptions): 'always' | 'on_demand' | undefined {
  if (options.always && options.onDemand) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', '--always and --on-demand cannot both be given');
  }
  return options.always ? 'always' : options.onDemand ? 'on_demand' : undefined;
}

function print(verb: string, body: Record<string, any>, options: SkillWriteOptions): void {
  if (options.json) {
    console.log(JSON.stringify(body));
    return;
  }
  if (!body.changed) {
    console.log(`skill ${body.name} unchanged (${body.path})`);
    return;
  }
  const diff = body.diff_size_bytes === null ? '' : `, ${body.diff_size_bytes} bytes changed`;
  console.log(`${verb} skill ${body.name} (${body.source}, ${body.size_tokens} tokens${diff}): ${body.path}`);
  console.log(`security scan: ${body.scan.result}`);
  for (const f of body.scan.findings) {
    console.log(`  line ${f.line}: ${f.reason} [${f.rule}, ${f.severity}]: ${f.excerpt}`);
  }
}

/**
 * `metis skills create <name>`: the running server writes `.metis/skills/<name>/SKILL.md` (or the global
 * one) after a security scan and records `skill.created`, as `metis memory clear` goes through it.
 */
export async function skillsCreateCommand(name: string, options: SkillWriteOptions): Promise<void> {
  checkName(name);
  const workspace = resolve(options.workspace ?? process.cwd());
  const load = loadOf(options) ?? 'on_demand';
  const body = await bodyOf(options, async () => `# ${name}\n\nInstructions for the agent.\n`);
  const missing = [
    ...(options.description === undefined ? ['--description'] : []),
    ...(body === undefined ? ['--body or --body-file (or run in a terminal with $EDITOR set)'] : []),
  ];
  if (missing.length > 0) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `a new skill needs ${missing.join(' and ')}`);
  }
  const written = await apiRequest(await serverTarget(options), 'POST', '/skills/create', {
    workspace_path: workspace,
    name,
    global: options.global ?? false,
    description: options.description,
    body,
    load,
    force: options.force ?? false,
  });
  print('created', written, options);
}

/** The body the editor starts from: the skill's as this machine sees it, else an empty one. */
async function currentBody(name: string, workspace: string, options: SkillWriteOptions): Promise<string> {
  const { config } = await loadConfig({ explicitPath: options.config ?? null });
  const roots = skillRoots(workspace, globalSkillsDir(config.runtime.skills.global_dir));
  const path = join(options.global ? roots.global : roots.workspace, name, SKILL_FILE);
  const text = await readFile(path, 'utf8').catch(() => '');
  const fence = text.split('\n').findIndex((line, i) => i > 0 && line.trim() === '---');
  return fence < 0
    ? text
    : text
        .split('\n')
        .slice(fence + 1)
        .join('\n')
        .trimStart();
}

/** `metis skills edit <name>`: changes what the flags give, through the server (`skill.modified`). */
export async function skillsEditCommand(name: string, options: SkillWriteOptions): Promise<void> {
  checkName(name);
  const workspace = resolve(options.workspace ?? process.cwd());
  const load = loadOf(options);
  const body = await bodyOf(options, () => currentBody(name, workspace, options));
  if (body === undefined && options.description === undefined && load === undefined) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `nothing to change in skill ${name}: pass --description, --body, --body-file, --always or --on-demand`,
      { hint: 'In a terminal with $EDITOR set, `metis skills edit <name>` opens the body in the editor.' },
    );
  }
  const written = await apiRequest(await serverTarget(options), 'POST', '/skills/edit', {
    workspace_path: workspace,
    name,
    global: options.global ?? false,
    ...(options.description === undefined ? {} : { description: options.description }),
    ...(body === undefined ? {} : { body }),
    ...(load === undefined ? {} : { load }),
    ...(options.reason === undefined ? {} : { reason: options.reason }),
    force: options.force ?? false,
  });
  print('edited', written, options);
}
