import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { EventBus } from '../../bus/event-bus.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import {
  emptyDocument,
  evictOldest,
  hashOf,
  MEMORY_DIR,
  type MemoryDocument,
  type MemoryFileName,
  memoryFileError,
  parseMemory,
  renderMemory,
  sizeOf,
} from './memory-file.js';

/** A memory file as read from disk. */
export interface MemorySnapshot {
  readonly file: MemoryFileName;
  readonly path: string;
  readonly exists: boolean;
  /** The bytes on disk ('' when the file does not exist). */
  readonly text: string;
  readonly document: MemoryDocument;
}

/** `<workspace>/.metis/<file>`. */
export function memoryPath(workspace: string, file: MemoryFileName): string {
  return join(workspace, MEMORY_DIR, file);
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw memoryFileError(path, `cannot be read (${(error as Error).message})`);
  }
}

/**
 * Reads and checks a memory file: over `maxBytes` or malformed, it is an error naming the file (a
 * hand edit went too far; nothing is dropped behind the user's back). A missing file is empty.
 */
export async function readMemoryFile(
  workspace: string,
  file: MemoryFileName,
  maxBytes: number,
): Promise<MemorySnapshot> {
  const path = memoryPath(workspace, file);
  const text = await readText(path);
  if (text === null) return { file, path, exists: false, text: '', document: { preamble: '', entries: [] } };
  const size = sizeOf(text);
  if (size > maxBytes) {
    throw memoryFileError(
      path,
      `is ${size} bytes, over the cap of ${maxBytes} (runtime.memory.max_bytes); shorten it or raise the cap`,
    );
  }
  return { file, path, exists: true, text, document: parseMemory(text, path) };
}

/**
 * Replaces the file in one step: the text goes to a temporary file beside it, is flushed to disk, and
 * is renamed over the old one, so a reader sees the old file or the new one, never half of either.
 */
export async function writeAtomically(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temporary = join(dirname(path), `.${randomBytes(6).toString('hex')}.tmp`);
  try {
    const handle = await open(temporary, 'wx', 0o600);
    try {
      await handle.writeFile(text, 'utf8');
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, path);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
}

/** Where a change is recorded: the tool call's session, turn and `llm.call_completed`. */
export interface MemoryEventContext {
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly callCompletedEventId: string | null;
}

export type MemoryOperation = 'add' | 'replace' | 'consolidate';

export interface MemoryChange {
  readonly file: MemoryFileName;
  readonly path: string;
  readonly operation: MemoryOperation;
  readonly sizeBytes: number;
  readonly entries: number;
  readonly evicted: number;
}

/** What an operation did to a file's entries, or why it could not (a message for the model). */
export type Edit = (entries: readonly string[]) => string[];

/**
 * Changes to memory files, one at a time per file, each written atomically and recorded on the bus:
 * `memory.updated` (parent: the `llm.call_completed` that asked), then, when the new text is over the
 * cap, `memory.eviction` size_cap_exceeded (parent: that `memory.updated`) with the oldest entries gone.
 * The file is written once, with the entries that fit.
 */
export class MemoryStore {
  /** Shared by every store of the process (the tool's, the clear route's): one change at a time per file. */
  private static readonly queues = new Map<string, Promise<unknown>>();

  constructor(
    private readonly bus: EventBus,
    readonly maxBytes: number,
  ) {}

  /** Runs `task` after every earlier task on the same path. */
  private serial<T>(path: string, task: () => Promise<T>): Promise<T> {
    const previous = MemoryStore.queues.get(path) ?? Promise.resolve();
    const next = previous.then(task, task);
    const settled = next.catch(() => undefined);
    MemoryStore.queues.set(path, settled);
    void settled.then(() => {
      if (MemoryStore.queues.get(path) === settled) MemoryStore.queues.delete(path);
    });
    return next;
  }

  update(
    workspace: string,
    file: MemoryFileName,
    operation: MemoryOperation,
    edit: Edit,
    context: MemoryEventContext,
  ): Promise<MemoryChange> {
    return this.serial(memoryPath(workspace, file), async () => {
      const before = await readMemoryFile(workspace, file, this.maxBytes);
      const base = before.exists ? before.document : emptyDocument(file);
      const edited: MemoryDocument = { preamble: base.preamble, entries: edit(base.entries) };
      const editedText = renderMemory(edited);
      const { document, evicted, fits } = evictOldest(edited, this.maxBytes);
      if (!fits || (document.entries.length === 0 && edited.entries.length > 0)) {
        throw memoryFileError(
          before.path,
          `the change does not fit the cap of ${this.maxBytes} bytes (runtime.memory.max_bytes) even with every older entry dropped`,
        );
      }
      const finalText = renderMemory(document);
      await writeAtomically(before.path, finalText);
      const updated = this.bus.emit({
        type: 'memory.updated',
        session_id: context.sessionId,
        turn_id: context.turnId,
        parent_event_id: context.callCompletedEventId,
        payload: {
          file,
          operation,
          before_hash: hashOf(before.text),
          after_hash: hashOf(editedText),
          before_size_bytes: sizeOf(before.text),
          after_size_bytes: sizeOf(editedText),
        },
      });
      if (evicted > 0) {
        this.bus.emit({
          type: 'memory.eviction',
          session_id: context.sessionId,
          turn_id: context.turnId,
          parent_event_id: updated?.id ?? null,
          payload: {
            file,
            trigger: 'size_cap_exceeded',
            entries_evicted: evicted,
            size_before_bytes: sizeOf(editedText),
            size_after_bytes: sizeOf(finalText),
          },
        });
      }
      return {
        file,
        path: before.path,
        operation,
        sizeBytes: sizeOf(finalText),
        entries: document.entries.length,
        evicted,
      };
    });
  }

  /**
   * Empties a file by hand (`metis memory clear`): every entry goes, the preamble stays, and
   * `memory.eviction` manual is recorded in the system session. Works on a file over the cap or
   * malformed too (that is when it is needed): lines that are not entries go with the entries.
   */
  clear(
    workspace: string,
    file: MemoryFileName,
  ): Promise<{ file: MemoryFileName; path: string; entries_evicted: number; event_id: string | null }> {
    const path = memoryPath(workspace, file);
    return this.serial(path, async () => {
      const text = await readText(path);
      if (text === null) return { file, path, entries_evicted: 0, event_id: null };
      const document = parseMemory(text, path, { lenient: true });
      const after = renderMemory({ preamble: document.preamble, entries: [] });
      await writeAtomically(path, after);
      const event = this.bus.emit({
        type: 'memory.eviction',
        session_id: SYSTEM_SESSION_ID,
        turn_id: null,
        parent_event_id: null,
        payload: {
          file,
          trigger: 'manual',
          entries_evicted: document.entries.length,
          size_before_bytes: sizeOf(text),
          size_after_bytes: sizeOf(after),
        },
      });
      return { file, path, entries_evicted: document.entries.length, event_id: event?.id ?? null };
    });
  }
}
