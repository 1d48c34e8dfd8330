import { isAbsolute } from 'node:path';
import { z } from 'zod';
import type { EventBus } from '../bus/event-bus.js';
import { type JsonRoute, jsonRoute } from '../http/routes.js';
import { MEMORY_FILES } from '../runtime/memory/memory-file.js';
import { MemoryStore } from '../runtime/memory/memory-store.js';

const MemoryClearBody = z.strictObject({
  workspace_path: z
    .string()
    .min(1)
    .refine(isAbsolute, 'must be an absolute path')
    .describe('the workspace whose .metis/MEMORY.md and .metis/USER.md are cleared'),
  file: z
    .enum(['memory', 'user'])
    .optional()
    .describe('only MEMORY.md (memory) or USER.md (user); default both'),
});

const MemoryClearedAnswer = z.object({
  cleared: z.array(
    z.object({
      file: z.enum(['MEMORY.md', 'USER.md']),
      path: z.string(),
      entries_evicted: z.int().nonnegative(),
      event_id: z.string().nullable().describe('the memory.eviction recorded; null when there was no file'),
    }),
  ),
});

/**
 * `POST /memory/clear`: empties a workspace's memory files by hand (`metis memory clear`), recorded as
 * `memory.eviction` with trigger `manual` in the system session. The server does it, not the CLI, so
 * the event reaches the trace like every other.
 */
export function memoryRoutes(bus: EventBus, maxBytes: number): JsonRoute[] {
  const store = new MemoryStore(bus, maxBytes);
  return [
    jsonRoute(
      {
        method: 'POST',
        path: '/memory/clear',
        summary: "Clear a workspace's memory files (memory.eviction, manual)",
        body: MemoryClearBody,
        success: { status: 200, description: 'what each file lost', schema: MemoryClearedAnswer },
        errors: ['METIS_ERR_INVALID_ARGUMENT'],
      },
      async ({ body }) => {
        const keys = body.file === undefined ? (['memory', 'user'] as const) : [body.file];
        const cleared = [];
        for (const key of keys) cleared.push(await store.clear(body.workspace_path, MEMORY_FILES[key]));
        return [200, { cleared }];
      },
    ),
  ];
}
