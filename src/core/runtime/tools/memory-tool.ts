import { relative } from 'node:path';
import { z } from 'zod';
import { isMetisError } from '../../errors.js';
import { MEMORY_FILES, normalizeEntry } from '../memory/memory-file.js';
import type { Edit, MemoryStore } from '../memory/memory-store.js';
import { boundedSummary } from './summary-bound.js';
import { defineTool, ToolError } from './tool.js';

export interface MemoryToolOptions {
  readonly store: MemoryStore;
}

const inputSchema = z.strictObject({
  action: z
    .enum(['add', 'replace', 'consolidate'])
    .describe(
      "add: append `text` as a new entry. replace: the one entry containing `old_text` becomes `text` (empty `text` removes it). consolidate: the file's entries become `entries`, oldest first (merge and shorten them).",
    ),
  file: z
    .enum(['memory', 'user'])
    .default('memory')
    .describe('memory: your notes for this workspace (MEMORY.md). user: facts about the user (USER.md).'),
  text: z.string().optional().describe('The entry to add, or the new text of the replaced entry.'),
  old_text: z.string().optional().describe('replace: a piece of text found in exactly one entry.'),
  entries: z.array(z.string()).optional().describe('consolidate: every entry the file keeps.'),
});

type MemoryInput = z.output<typeof inputSchema>;

function required(value: string | undefined, field: string, action: string): string {
  const entry = normalizeEntry(value ?? '');
  if (entry === '') throw new ToolError('validation_error', `${action} needs a non-empty \`${field}\``);
  return entry;
}

/** What the input does to the entries; refuses, naming the file, what cannot be done. */
function editOf(input: MemoryInput, fileName: string): Edit {
  switch (input.action) {
    case 'add': {
      const text = required(input.text, 'text', 'add');
      return (entries) => [...entries, text];
    }
    case 'replace': {
      const needle = (input.old_text ?? '').trim();
      if (needle === '') throw new ToolError('validation_error', 'replace needs a non-empty `old_text`');
      const text = normalizeEntry(input.text ?? '');
      return (entries) => {
        const hits = entries.flatMap((entry, i) => (entry.includes(needle) ? [i] : []));
        if (hits.length !== 1) {
          throw new ToolError(
            hits.length === 0 ? 'not_found' : 'validation_error',
            `${fileName}: ${hits.length === 0 ? 'no entry contains' : `${hits.length} entries contain`} ${JSON.stringify(needle)}; give text found in exactly one`,
          );
        }
        return entries.flatMap((entry, i) => (i !== hits[0] ? [entry] : text === '' ? [] : [text]));
      };
    }
    case 'consolidate': {
      if (input.entries === undefined)
        throw new ToolError('validation_error', 'consolidate needs `entries`, the list the file keeps');
      const entries = input.entries.map(normalizeEntry);
      if (entries.some((entry) => entry === ''))
        throw new ToolError('validation_error', 'consolidate: every entry needs text');
      return () => entries;
    }
  }
}

/**
 * `memory`: the agent's persistent memory of the workspace, `.metis/MEMORY.md` (its notes) and
 * `.metis/USER.md` (about the user), which reach the model in the system prompt (memory-prompt.ts).
 * Each change is `memory.updated`, and one past the cap also `memory.eviction` (memory-store.ts).
 */
export function createMemoryTool(options: MemoryToolOptions) {
  return defineTool({
    name: 'memory',
    description:
      'Your memory across sessions of this workspace, shown to you at the start of every turn. Add short durable facts worth keeping (decisions, conventions, preferences); replace outdated ones; consolidate when the file grows. Oldest entries are dropped past the size cap.',
    inputSchema,
    sideEffects: 'write',
    summarize: (input) => {
      const file = MEMORY_FILES[input.file];
      const what = input.action === 'consolidate' ? `${input.entries?.length ?? 0} entries` : input.text;
      return {
        input_summary: boundedSummary(`${input.action} in ${file}: ${what ?? ''}`),
        projected_modifications: [`.metis/${file}`],
      };
    },
    async execute(input, context) {
      const file = MEMORY_FILES[input.file];
      const edit = editOf(input, file);
      try {
        const change = await options.store.update(context.workspacePath, file, input.action, edit, {
          sessionId: context.sessionId,
          turnId: context.turnId,
          callCompletedEventId: context.callCompletedEventId,
        });
        const dropped = change.evicted > 0 ? `; ${change.evicted} oldest entries dropped to fit the cap` : '';
        return {
          content: `${file} ${input.action === 'add' ? 'updated' : `${input.action}d`}: ${change.entries} entries, ${change.sizeBytes} bytes${dropped}.`,
          filesModified: [relative(context.workspacePath, change.path)],
        };
      } catch (error) {
        if (isMetisError(error)) throw new ToolError('validation_error', error.message);
        throw error;
      }
    },
  });
}
