import { onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineTool, type Tool } from '../../src/core/runtime/tools/tool.js';
import { openTraceContext, type TraceContext } from '../../src/core/store/trace-context.js';

/** A trace context on a real SQLite file, validating every event strictly. */
export function openStrict(dbPath: string): TraceContext {
  return openTraceContext({ dbPath, validation: 'strict' });
}

/**
 * "Crashes" a process's trace context (its writer and database closed under it, as a SIGKILL leaves
 * the file: nothing more of it reaches the store) and opens the same file again, as the next start does.
 */
export function crashAndReopen(first: TraceContext): TraceContext {
  crash(first);
  const second = openStrict(first.dbPath);
  onTestFinished(() => second.close());
  return second;
}

/** Closes a process's writer and database under it, as a SIGKILL leaves the file. */
export function crash(context: TraceContext): void {
  context.writer.close();
  context.db.close();
}

/** A tool that never ends: a crash lands while it runs (its tool-call row stays `running`). */
export const hangs: Tool = defineTool({
  name: 'hang',
  description: 'never ends: the crash lands in it',
  inputSchema: z.strictObject({}),
  sideEffects: 'none',
  async execute() {
    await new Promise(() => {});
    return { content: 'unreachable' };
  },
});
