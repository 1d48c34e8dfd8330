import { createHash } from 'node:crypto';
import { MetisError } from '../../errors.js';

/** The file of a skill, inside its own folder: `<skills dir>/<name>/SKILL.md`. */
export const SKILL_FILE = 'SKILL.md';

/** How a skill reaches the context: at the session's first turn, or when the model asks for it. */
export type SkillLoadMode = 'always' | 'on_demand';

/** Which skills folder served a skill: `$METIS_HOME/skills` or `<workspace>/.metis/skills`. */
export type SkillSource = 'global' | 'workspace';

/** A skill as parsed from its SKILL.md. */
export interface Skill {
  /** The folder's name, equal to the front matter's `name`: the skill's id. */
  readonly name: string;
  readonly description: string;
  readonly load: SkillLoadMode;
  /** The front matter's `version`, else `sha256:` and the first 12 hex digits of the file's hash. */
  readonly version: string;
  /** What goes into the context: the text after the front matter, trimmed. */
  readonly body: string;
  readonly path: string;
  readonly source: SkillSource;
  /** The file's bytes, as read. */
  readonly text: string;
}

/** Skill names: lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit. */
export const SKILL_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

const KEYS = new Set(['name', 'description', 'load', 'version']);

/** A SKILL.md metis will not use as it is: the message names the file (and the line when there is one). */
export function skillFileError(path: string, problem: string): MetisError {
  return new MetisError('METIS_ERR_INVALID_ARGUMENT', `skill file ${path}: ${problem}`, {
    hint: 'A SKILL.md starts with front matter between two "---" lines: name, description, and optionally load (always or on_demand) and version. See docs/skills.md.',
  });
}

/** Lowercase hex SHA-256 of the text's bytes. */
export function hashOf(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** The size of text in the context, estimated as the runtime does for messages: 4 characters a token. */
export function tokensOf(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

function unquote(value: string): string {
  const quoted = /^(["'])(.*)\1$/.exec(value);
  return quoted ? quoted[2]! : value;
}

/**
 * Parses a SKILL.md. Front matter between a first line `---` and the next `---` line holds one
 * `key: value` per line (keys: name, description, load, version; `#` lines are comments); the rest is
 * the body. `folder` is the name of the skill's folder, which `name` must equal. Anything else is an
 * error naming the file (and the line).
 */
export function parseSkill(text: string, path: string, folder: string, source: SkillSource): Skill {
  const lines = text
    .replace(/^\uFEFF/, '')
    .replace(/\r\n/g, '\n')
    .split('\n');
  if (lines[0]?.trim() !== '---')
    throw skillFileError(path, 'line 1 is not "---", the start of the front matter');
  const end = lines.findIndex((line, i) => i > 0 && line.trim() === '---');
  if (end < 0) throw skillFileError(path, 'the front matter has no closing "---" line');
  const fields = new Map<string, string>();
  for (let i = 1; i < end; i += 1) {
    const line = lines[i]!;
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    const match = /^([A-Za-z_][\w-]*):\s*(.*)$/.exec(line);
    if (!match)
      throw skillFileError(path, `line ${i + 1} is not "key: value": ${JSON.stringify(line.slice(0, 60))}`);
    const key = match[1]!;
    if (!KEYS.has(key)) {
      throw skillFileError(path, `line ${i + 1}: unknown key "${key}" (known: ${[...KEYS].join(', ')})`);
    }
    if (fields.has(key)) throw skillFileError(path, `line ${i + 1}: "${key}" is given twice`);
    fields.set(key, unquote(match[2]!.trim()));
  }
  const name = fields.get('name') ?? '';
  if (name === '') throw skillFileError(path, 'the front matter has no `name`');
  if (!SKILL_NAME.test(name)) {
    throw skillFileError(
      path,
      `name "${name}" is not a skill name (lowercase letters, digits, "-", "_", ".")`,
    );
  }
  if (name !== folder)
    throw skillFileError(path, `name "${name}" differs from its folder's name "${folder}"`);
  const description = fields.get('description') ?? '';
  if (description === '') throw skillFileError(path, 'the front matter has no `description`');
  const load = fields.get('load') ?? 'on_demand';
  if (load !== 'always' && load !== 'on_demand') {
    throw skillFileError(path, `load "${load}" is neither "always" nor "on_demand"`);
  }
  const body = lines
    .slice(end + 1)
    .join('\n')
    .trim();
  if (body === '') throw skillFileError(path, 'the body (the text after the front matter) is empty');
  const version = fields.get('version') || `sha256:${hashOf(text).slice(0, 12)}`;
  return { name, description, load, version, body, path, source, text };
}

/** A SKILL.md's text from its parts, as `metis skills create` writes it. */
export function renderSkill(fields: {
  name: string;
  description: string;
  load: SkillLoadMode;
  body: string;
}): string {
  return [
    '---',
    `name: ${fields.name}`,
    `description: ${fields.description.replace(/\s+/g, ' ').trim()}`,
    `load: ${fields.load}`,
    '---',
    '',
    fields.body.trim(),
    '',
  ].join('\n');
}
