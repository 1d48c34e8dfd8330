import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Frame } from '../../src/client/reducer.js';

/** The recorded frame traces (test/streaming-conformance/README.md). */
export const TRACES_DIR = join(import.meta.dirname, '../streaming-conformance');

/** The frames of a recorded trace, parsed (a fresh copy each call: tests may edit them). */
export function traceFrames(name: string): Frame[] {
  return readFileSync(join(TRACES_DIR, `${name}.jsonl`), 'utf8')
    .trimEnd()
    .split('\n')
    .map((line) => JSON.parse(line) as Frame);
}
