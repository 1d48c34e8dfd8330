import { renderSkill, type SkillLoadMode } from './skill-file.js';

export interface SkillEdit {
  readonly description?: string;
  readonly load?: SkillLoadMode;
  readonly body?: string;
}

/**
 * A SKILL.md with some fields changed and everything else as the user wrote it (comments, `version`,
 * key order, line endings of the front matter): a key's line is replaced in place, a key that was not
 * there goes just before the closing `---`, and a new body replaces all that follows it. A file with
 * no front matter to edit is written anew from the fields (the parse that follows names what is
 * missing).
 */
export function editFrontMatter(text: string, name: string, edit: SkillEdit): string {
  const lines = text.replace(/^\uFEFF/, '').split('\n');
  const end = lines[0]?.trim() === '---' ? lines.findIndex((l, i) => i > 0 && l.trim() === '---') : -1;
  if (end < 0) {
    return renderSkill({
      name,
      description: edit.description ?? '',
      load: edit.load ?? 'on_demand',
      body: edit.body ?? '',
    });
  }
  const head = lines.slice(0, end);
  const set = (key: string, value: string | undefined) => {
    if (value === undefined) return;
    const line = `${key}: ${value}`;
    const at = head.findIndex((l) => new RegExp(`^${key}:`).test(l));
    if (at >= 0) head[at] = line;
    else head.push(line);
  };
  set('description', edit.description?.replace(/\s+/g, ' ').trim());
  set('load', edit.load);
  const body = edit.body === undefined ? lines.slice(end + 1).join('\n') : `\n${edit.body.trim()}\n`;
  return [...head, lines[end]!, body].join('\n');
}
