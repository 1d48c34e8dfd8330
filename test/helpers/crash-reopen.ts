import { onTestFinished } from 'vitest';
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
