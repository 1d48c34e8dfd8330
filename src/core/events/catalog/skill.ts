import { z } from 'zod';
import { defineEventType, nonNegativeInt } from '../define.js';

export const skillLoaded = defineEventType({
  type: 'skill.loaded',
  domain: 'skill',
  schema: z.strictObject({
    skill_id: z.string().min(1),
    skill_version: z.string(),
    load_reason: z.enum(['always', 'on_demand', 'auto_suggested']),
    load_size_tokens: nonNegativeInt,
    // "additive 2026-05-12" in the spec, but typed as a required Literal with no None: required here.
    source: z.enum(['global', 'workspace']),
    triggered_by_tool_use_id: z.string().nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '2',
  audit: false,
  parent: 'session.started (load_reason "always") or llm.call_completed (on-demand load)',
  description: 'A skill was loaded into the context, pre-activated or on demand.',
});

export const skillCreated = defineEventType({
  type: 'skill.created',
  domain: 'skill',
  schema: z.strictObject({
    skill_id: z.string().min(1),
    source: z.enum(['manual', 'auto_generated', 'imported']),
    source_session_id: z.string().nullable(),
    size_tokens: nonNegativeInt,
    security_scan_result: z.enum(['clean', 'warning', 'blocked']).nullable(),
    security_scan_findings: z.array(z.string()),
  }),
  sensitivity: 'user_controlled',
  actors: ['system', 'user'],
  phase: '2.5',
  audit: false,
  parent: 'session.ended (auto-generation) or none (manual)',
  description: 'A skill was created manually, auto-generated from a session, or imported.',
});

export const skillModified = defineEventType({
  type: 'skill.modified',
  domain: 'skill',
  schema: z.strictObject({
    skill_id: z.string().min(1),
    modification_type: z.enum(['edit', 'version_bump', 'rename']),
    before_hash: z.string(),
    after_hash: z.string(),
    diff_size_bytes: nonNegativeInt,
    reason: z.string(),
  }),
  sensitivity: 'user_controlled',
  actors: ['system', 'user'],
  phase: '2',
  audit: false,
  parent: 'varies',
  description: 'A skill was edited, version-bumped or renamed.',
});

export const skillSearch = defineEventType({
  type: 'skill.search',
  domain: 'skill',
  schema: z.strictObject({
    query: z.string(),
    results_count: nonNegativeInt,
    result_skill_ids: z.array(z.string()),
  }),
  sensitivity: 'private',
  actors: ['agent'],
  phase: '2',
  audit: false,
  parent: 'llm.call_completed',
  description: 'The agent searched the skill library.',
});

export const skillEvents = [skillLoaded, skillCreated, skillModified, skillSearch];
