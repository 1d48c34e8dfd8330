import { z } from 'zod';
import { defineEventType, nonNegativeInt } from '../define.js';

const MemoryFileSchema = z.enum(['MEMORY.md', 'USER.md']);

export const memoryUpdated = defineEventType({
  type: 'memory.updated',
  domain: 'memory',
  schema: z.strictObject({
    file: MemoryFileSchema,
    operation: z.enum(['add', 'replace', 'consolidate']),
    before_hash: z.string(),
    after_hash: z.string(),
    before_size_bytes: nonNegativeInt,
    after_size_bytes: nonNegativeInt,
  }),
  sensitivity: 'private',
  actors: ['agent'],
  phase: '2',
  audit: false,
  parent: 'llm.call_completed',
  description: 'The agent changed a memory file.',
});

export const memoryEviction = defineEventType({
  type: 'memory.eviction',
  domain: 'memory',
  schema: z.strictObject({
    file: MemoryFileSchema,
    trigger: z.enum(['size_cap_exceeded', 'manual']),
    entries_evicted: nonNegativeInt,
    size_before_bytes: nonNegativeInt,
    size_after_bytes: nonNegativeInt,
  }),
  sensitivity: 'private',
  actors: ['system'],
  phase: '2',
  audit: true,
  parent: 'memory.updated',
  description: 'Entries were evicted from a memory file over its size cap or by hand.',
});

export const memoryEvents = [memoryUpdated, memoryEviction];
