import type { Logger } from 'pino';
import { MEMORY_DIR, type MemoryFileName } from './memory-file.js';
import { readMemoryFile } from './memory-store.js';

const HEADINGS: Readonly<Record<MemoryFileName, string>> = {
  'MEMORY.md': 'Your notes for this workspace',
  'USER.md': 'What you know about the user',
};

/**
 * The system prompt that carries a workspace's memory to the model: the entries of MEMORY.md and
 * USER.md, read afresh for every model call (so a change made in a turn is seen by its next call).
 * Null when both files are missing or empty. A file that cannot be used (over the cap, malformed) is
 * left out with a line saying why, so the model can tell the user, and a warning naming it is logged;
 * the turn goes on.
 */
export async function memoryPrompt(
  workspace: string,
  maxBytes: number,
  logger?: Logger,
): Promise<string | null> {
  const sections: string[] = [];
  for (const file of ['MEMORY.md', 'USER.md'] as const) {
    const where = `${MEMORY_DIR}/${file}`;
    try {
      const { document } = await readMemoryFile(workspace, file, maxBytes);
      if (document.entries.length === 0) continue;
      const items = document.entries.map((entry) => `- ${entry.split('\n').join('\n  ')}`).join('\n');
      sections.push(`## ${HEADINGS[file]} (${where})\n${items}`);
    } catch (error) {
      const message = (error as Error).message;
      logger?.warn({ workspace, file, err: message }, 'memory file left out of the system prompt');
      sections.push(`## ${HEADINGS[file]} (${where})\nNot loaded: ${message}`);
    }
  }
  if (sections.length === 0) return null;
  return [
    'You keep a memory across sessions in this workspace; change it with the `memory` tool.',
    ...sections,
  ].join('\n\n');
}
