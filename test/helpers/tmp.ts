import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import {
  type OpenTraceContextOptions,
  openTraceContext,
  type TraceContext,
} from '../../src/core/store/trace-context.js';

/** A fresh temp folder, removed when the current test finishes. */
export function tempDir(prefix = 'metis-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A real trace store on a real SQLite file in a temp folder, closed when the test finishes. */
export function tempTraceContext(options: Partial<OpenTraceContextOptions> = {}): TraceContext {
  const dbPath = options.dbPath ?? join(tempDir(), 'metis.db');
  const context = openTraceContext({ validation: 'strict', ...options, dbPath });
  onTestFinished(() => context.close());
  return context;
}
