import { describe, expect, it } from 'vitest';
import {
  AUDIT_EVENT_TYPES,
  CATALOG,
  CATALOG_DOMAINS,
  CATALOG_ENTRIES,
} from '../src/core/events/catalog/index.js';
import type { CatalogEntry } from '../src/core/events/define.js';
import { ACTORS, isMorePrivate, SENSITIVITIES } from '../src/core/events/envelope.js';
import {
  RESERVED_STREAMING_PREFIXES,
  STREAMING_ENTRIES,
  STREAMING_TYPES,
} from '../src/core/events/streaming.js';
import { sha256 } from './helpers/events.js';

/** The closed domain list: bus spec §4.5 plus the gateway, trace, quota and analytics sections. */
const SPEC_DOMAINS = [
  'session',
  'turn',
  'llm',
  'tool',
  'route',
  'skill',
  'memory',
  'delegate',
  'feedback',
  'bus',
  'pattern',
  'provider',
  'eval',
  'gateway',
  'trace',
  'quota',
  'analytics',
];

/** §7.6 (ten catalog-domain types) plus trace.swept and the two analytics types. */
const SPEC_AUDIT_TYPES = [
  'gateway.key_issued',
  'gateway.key_revoked',
  'gateway.key_rotated',
  'gateway.quota_exceeded',
  'gateway.auth_failed',
  'quota.alert',
  'routing.policy_invalid',
  'memory.eviction',
  'pattern.evicted',
  'tool.confirmation_resolved',
  'trace.swept',
  'analytics.user_exported',
  'analytics.user_forgotten',
];

function entry(type: string): CatalogEntry {
  const found = CATALOG.get(type);
  if (found === undefined) throw new Error(`no catalog entry for ${type}`);
  return found;
}

function resolved(type: string, payload: Record<string, unknown>) {
  const e = entry(type);
  const parsed = e.schema.parse(payload);
  return {
    floor: e.sensitivity,
    actual: e.resolveSensitivity ? e.resolveSensitivity(parsed) : e.sensitivity,
  };
}

describe('the closed catalog (bus spec §6)', () => {
  it('names every type <domain>.<verb_phrase> in dotted lowercase, each once', () => {
    const types = CATALOG_ENTRIES.map((e) => e.type);
    for (const type of types) expect(type).toMatch(/^[a-z]+\.[a-z][a-z_]*[a-z]$/);
    expect(new Set(types).size).toBe(types.length);
    expect(CATALOG.size).toBe(types.length);
  });

  it('has at least 50 types', () => {
    // 51 today: session 3, turn 3, llm 3, tool 6, route 4, pattern 5, skill 4, memory 2, delegate 3,
    // feedback 2, bus 3, provider 1, eval 3, gateway 5, trace 1, quota 1, analytics 2.
    expect(CATALOG_ENTRIES.length).toBeGreaterThanOrEqual(50);
  });

  it('keeps out of the streaming-only names (§4.5.1)', () => {
    for (const { type } of CATALOG_ENTRIES) {
      for (const prefix of RESERVED_STREAMING_PREFIXES) expect(type.startsWith(prefix), type).toBe(false);
      expect(STREAMING_TYPES.has(type), type).toBe(false);
    }
    for (const { type } of STREAMING_ENTRIES) {
      expect(
        RESERVED_STREAMING_PREFIXES.some((p) => type.startsWith(p)),
        type,
      ).toBe(true);
    }
  });

  it('covers exactly the domains of the spec', () => {
    expect([...CATALOG_DOMAINS].sort()).toEqual([...SPEC_DOMAINS].sort());
  });

  it('files routing.* under route and route.overridden under pattern', () => {
    for (const e of CATALOG_ENTRIES.filter((x) => x.type.startsWith('routing.')))
      expect(e.domain).toBe('route');
    expect(entry('route.decided').domain).toBe('route');
    expect(entry('route.overridden').domain).toBe('pattern');
  });

  it('flags exactly the audit subset (§7.6, §6.13, §6.14)', () => {
    expect([...AUDIT_EVENT_TYPES].sort()).toEqual([...SPEC_AUDIT_TYPES].sort());
  });

  it('gives every entry a known sensitivity, actors, a phase and a description', () => {
    for (const e of CATALOG_ENTRIES) {
      expect(e.family).toBe('catalog');
      expect(SENSITIVITIES).toContain(e.sensitivity);
      expect(e.actors.length).toBeGreaterThan(0);
      for (const actor of e.actors) expect(ACTORS).toContain(actor);
      expect(['1', '2', '2.5', '3', '4']).toContain(e.phase);
      expect(e.parent.length).toBeGreaterThan(0);
      expect(e.description.length).toBeGreaterThan(0);
    }
  });

  describe('dynamic sensitivity never goes below the floor (§4.4.1)', () => {
    const turnStarted = {
      user_message_hash: sha256('hello'),
      estimated_input_tokens: 3,
      has_images: false,
      has_tool_calls_in_history: false,
    };
    const evalCompleted = {
      eval_id: 'eval_01',
      subject_kind: 'turn',
      subject_id: 'turn_01',
      score: 0.8,
      confidence: 0.9,
      judge_kind: 'heuristic',
      judge_model: null,
      judge_cost_usd: '0',
      judge_pricing_version: null,
      judge_latency_ms: 4,
      rubric_id: 'default',
      rubric_version: '1',
      parent_eval_id: null,
    };

    it('turn.started: private without the opt-in text, user_controlled with it', () => {
      const without = resolved('turn.started', { ...turnStarted, user_message_text_redacted: null });
      const withText = resolved('turn.started', {
        ...turnStarted,
        user_message_text_redacted: 'what time is it?',
      });
      expect(without).toEqual({ floor: 'private', actual: 'private' });
      expect(withText).toEqual({ floor: 'private', actual: 'user_controlled' });
      for (const r of [without, withText]) expect(isMorePrivate(r.actual, r.floor)).toBe(false);
    });

    it('eval.completed: user_controlled with a rationale, pseudonymous without', () => {
      const withRationale = resolved('eval.completed', {
        ...evalCompleted,
        judge_kind: 'llm',
        judge_model: 'anthropic:claude-haiku',
        judge_cost_usd: '0.0004',
        judge_pricing_version: '2026-05',
        signals: { rationale_redacted: 'the answer matched the request' },
      });
      const heuristic = resolved('eval.completed', { ...evalCompleted, signals: { tool_errors: 0 } });
      expect(withRationale).toEqual({ floor: 'user_controlled', actual: 'user_controlled' });
      expect(heuristic).toEqual({ floor: 'user_controlled', actual: 'pseudonymous' });
      for (const r of [withRationale, heuristic]) expect(isMorePrivate(r.actual, r.floor)).toBe(false);
    });
  });
});

describe('the streaming-only family (streaming spec §5.3)', () => {
  it('has the seven types, with message output private', () => {
    expect(STREAMING_ENTRIES.map((e) => e.type)).toEqual([
      'message.start',
      'text.delta',
      'thinking.delta',
      'tool.use_start',
      'tool.use_input_delta',
      'tool.use_end',
      'message.complete',
    ]);
    for (const e of STREAMING_ENTRIES) {
      expect(e.family).toBe('streaming');
      expect(e.sensitivity).toBe(e.type === 'message.start' ? 'pseudonymous' : 'private');
    }
  });
});
