import { createHash } from 'node:crypto';
import { MetisError } from '../../errors.js';

/** The two memory files of a workspace: the agent's notes, and what it knows about the user. */
export type MemoryFileName = 'MEMORY.md' | 'USER.md';

/** How the CLI, the HTTP route and the tool name a file: `memory` is MEMORY.md, `user` is USER.md. */
export type MemoryFileKey = 'memory' | 'user';

export const MEMORY_FILES: Readonly<Record<MemoryFileKey, MemoryFileName>> = {
  memory: 'MEMORY.md',
  user: 'USER.md',
};

/** The folder of a workspace that holds its memory files. */
export const MEMORY_DIR = '.metis';

/**
 * A memory file as parsed: the preamble (everything before the first entry: headings, comments,
 * blank lines, kept as written) and the entries, oldest first.
 */
export interface MemoryDocument {
  readonly preamble: string;
  readonly entries: readonly string[];
}

const PREAMBLES: Readonly<Record<MemoryFileName, string>> = {
  'MEMORY.md': [
    '# Memory',
    '',
    'Notes the agent keeps for this workspace: one entry per "- " list item, oldest first.',
    'Edit freely; past runtime.memory.max_bytes the oldest entries are dropped.',
    '',
  ].join('\n'),
  'USER.md': [
    '# User',
    '',
    'What the agent knows about you: one entry per "- " list item, oldest first.',
    'Edit freely; past runtime.memory.max_bytes the oldest entries are dropped.',
    '',
  ].join('\n'),
};

/** A new file's document: the default preamble and no entries. */
export function emptyDocument(file: MemoryFileName): MemoryDocument {
  return { preamble: PREAMBLES[file], entries: [] };
}

/** Lowercase hex SHA-256 of the file's bytes (of the empty string for a file that does not exist). */
export function hashOf(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

export function sizeOf(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/** A memory file metis will not use as it is: the message names the file (and the line). */
export function memoryFileError(path: string, problem: string): MetisError {
  return new MetisError('METIS_ERR_INVALID_ARGUMENT', `memory file ${path}: ${problem}`, {
    hint: `Edit ${path} by hand (entries are "- " list items, continued on lines indented by two spaces), or run \`metis memory clear\`.`,
  });
}

const ENTRY = /^[-*] (.*)$/;
const CONTINUATION = /^ {2,}(\S.*)$/;

/**
 * Parses a memory file. Before the first entry anything goes (the preamble); from it on, every
 * non-blank line is an entry (`- text` or `* text`) or continues the one above (indented by at least
 * two spaces). Anything else is malformed: an error naming the file and the line (`lenient`: skipped).
 */
export function parseMemory(text: string, path: string, options: { lenient?: boolean } = {}): MemoryDocument {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  const preamble: string[] = [];
  const entries: string[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i]!;
    const entry = ENTRY.exec(line);
    if (entry) {
      const body = entry[1]!.trim();
      if (body === '') {
        if (options.lenient) continue;
        throw memoryFileError(path, `line ${i + 1} is an empty entry`);
      }
      entries.push(body);
      continue;
    }
    if (entries.length === 0) {
      preamble.push(line);
      continue;
    }
    if (line.trim() === '') continue;
    const continued = CONTINUATION.exec(line);
    if (continued) {
      entries[entries.length - 1] += `\n${continued[1]!.trimEnd()}`;
      continue;
    }
    if (options.lenient) continue;
    throw memoryFileError(
      path,
      `line ${i + 1} is not an entry: ${JSON.stringify(line.slice(0, 60))} (entries start with "- ")`,
    );
  }
  while (preamble.length > 0 && preamble[preamble.length - 1]!.trim() === '') preamble.pop();
  return { preamble: preamble.length === 0 ? '' : `${preamble.join('\n')}\n`, entries };
}

/** The file's text: the preamble, a blank line, then one list item per entry. */
export function renderMemory(document: MemoryDocument): string {
  const items = document.entries.map((entry) => `- ${entry.split('\n').join('\n  ')}\n`).join('');
  if (document.preamble === '') return items;
  return items === '' ? document.preamble : `${document.preamble}\n${items}`;
}

/**
 * One entry as the tool gives it: trimmed, blank lines dropped, each line stripped of a leading list
 * marker a model might add. Empty text is refused by the caller.
 */
export function normalizeEntry(text: string): string {
  return text
    .replace(/\r\n/g, '\n')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .map((line, i) => (i === 0 ? line.replace(/^[-*] +/, '') : line))
    .join('\n');
}

/**
 * Drops the oldest entries until the rendered file fits `maxBytes`. Returns the kept document and how
 * many entries went; `fits` is false when even the preamble alone is over the cap.
 */
export function evictOldest(
  document: MemoryDocument,
  maxBytes: number,
): { document: MemoryDocument; evicted: number; fits: boolean } {
  let evicted = 0;
  let kept = document;
  while (sizeOf(renderMemory(kept)) > maxBytes && kept.entries.length > 0) {
    kept = { preamble: kept.preamble, entries: kept.entries.slice(1) };
    evicted += 1;
  }
  return { document: kept, evicted, fits: sizeOf(renderMemory(kept)) <= maxBytes };
}
