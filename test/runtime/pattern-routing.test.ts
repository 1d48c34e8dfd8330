import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { fingerprintOf } from '../../src/core/runtime/patterns/fingerprint.js';
import {
  BETTER,
  buildUpPatterns as buildUp,
  PATTERN_CONFIG as PATTERNS,
  until,
  WORSE,
} from '../helpers/patterns.js';
import { type RuntimeHarness, startRuntime } from '../helpers/runtime.js';

/**
 * Issue 18 point 5 and bus §9.1 required tests 12 and 13: pattern routing learns from scored sessions,
 * chooses when nothing earlier in the chain decided, defers behind a rule, and the user applies or
 * dismisses a deferred recommendation.
 */

const of = (h: RuntimeHarness, type: string, turnId?: string): MetisEvent[] =>
  h.frames.filter((e) => e.type === type && (turnId === undefined || e.turn_id === turnId));

describe('pattern routing', () => {
  it('the same structural fingerprint for messages alike in shape, not in words', () => {
    const a = fingerprintOf('fail: server_error', false, 'abcdef0123456789');
    expect(fingerprintOf('hello there', false, 'abcdef0123456789').key).toBe(a.key);
    expect(fingerprintOf('hello there?', false, 'abcdef0123456789').key).not.toBe(a.key);
    expect(fingerprintOf('hello there', true, 'abcdef0123456789').key).not.toBe(a.key);
    expect(fingerprintOf('hello there', false, '999999999999').key).not.toBe(a.key);
    expect(fingerprintOf('const x = 1;', false, 'ab').features).toMatchObject({ has_code: true });
    expect(fingerprintOf('Как дела у тебя', false, 'ab').features.script).toBe('cyrillic');
    expect(fingerprintOf('今日はいい天気ですね', false, 'ab').features.script).toBe('cjk');
    expect(fingerprintOf('x'.repeat(250), false, 'ab').features.length_band).toBe('m');
  });

  it('records one outcome per fingerprint and model at session end, with the eval score and cost', async () => {
    const h = startRuntime(PATTERNS);
    await buildUp(h);
    const recorded = of(h, 'pattern.recorded');
    expect(recorded.map((e) => [e.payload.primary_model, e.payload.success_score])).toEqual([
      [WORSE, 0],
      [WORSE, 0],
      [BETTER, 1],
      [BETTER, 1],
    ]);
    expect(recorded.map((e) => e.payload.sample_size_after)).toEqual([1, 2, 1, 2]);
    expect(recorded.map((e) => e.payload.was_new_fingerprint)).toEqual([true, false, false, false]);
    expect(new Set(recorded.map((e) => e.payload.fingerprint_id)).size).toBe(1);
    for (const event of recorded) {
      const ended = h.frames.find((e) => e.id === event.parent_event_id)!;
      expect(ended.type).toBe('session.ended');
      expect(ended.session_id).toBe(event.session_id);
      expect(event.sensitivity).toBe('pseudonymous');
      expect(event.payload.cost_usd_at_record).toMatch(/^\d+(\.\d+)?$/);
    }
    // Kept in the database: a new runtime on the same file reads them back.
    expect(h.context.db.prepare('SELECT count(*) FROM pattern_outcomes').pluck().get()).toBe(4);
  });

  it('slot 4 chooses the better model when no earlier policy decided: pattern.matched', async () => {
    const h = startRuntime(PATTERNS);
    await buildUp(h);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { turnId, done } = h.runtime.submitTurn(session.id, 'good morning');
    await h.settle(done);
    const [decided] = of(h, 'route.decided', turnId);
    expect(decided!.payload.chosen_model).toBe(BETTER);
    const slot = (decided!.payload.chain as any[]).find((c) => c.policy === 'pattern');
    expect(slot).toMatchObject({ verdict: 'chose', candidate_model: BETTER, confidence: 0.5 });
    expect(slot.pattern_alternatives).toEqual([
      { model: BETTER, score: 1, sample_size: 2 },
      { model: WORSE, score: 0, sample_size: 2 },
    ]);
    const [matched] = of(h, 'pattern.matched', turnId);
    expect(matched).toMatchObject({
      parent_event_id: decided!.id,
      payload: { chosen_model: BETTER, sample_size: 2, k_cluster_size: 4, alternatives_count: 2 },
    });
    expect(of(h, 'llm.call_started', turnId)[0]!.payload.model).toBe(BETTER);
    // A message of another shape has no history: the global default, and the pattern says why.
    const other = h.runtime.submitTurn(session.id, 'and now, a much longer question about the weather?');
    await h.settle(other.done);
    const [plain] = of(h, 'route.decided', other.turnId);
    expect(plain!.payload.chosen_model).toBe(WORSE);
    expect((plain!.payload.chain as any[]).find((c) => c.policy === 'pattern')).toMatchObject({
      verdict: 'not_applicable',
      reason: 'no similar turns recorded',
    });
  });

  it('bus §9.1 tests 12 and 13: an override re-dispatches the turn; route.decided once and unchanged', async () => {
    const h = startRuntime(PATTERNS);
    await buildUp(h);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { turnId, done } = h.runtime.submitTurn(session.id, 'slow: tell me');
    await until(
      () => of(h, 'route.decided', turnId).length > 0 || of(h, 'text.delta', turnId).length > 0,
      'routing',
    );
    await h.context.flush();
    await until(() => of(h, 'text.delta', turnId).length > 0, 'the first answer to stream');
    const [decidedLive] = of(h, 'route.decided', turnId);
    expect(decidedLive!.payload.chosen_model).toBe(WORSE);
    const slot = (decidedLive!.payload.chain as any[]).find((c) => c.policy === 'pattern');
    expect(slot).toMatchObject({ verdict: 'deferred', candidate_model: BETTER });

    const answer = h.runtime.overrideRoute(session.id);
    expect(answer).toEqual({ turn_id: turnId, original_chosen_model: WORSE, new_chosen_model: BETTER });
    await h.settle(done);

    // Test 12: exactly one route.decided, followed by exactly one route.overridden; the decision as it was.
    const decided = of(h, 'route.decided', turnId);
    const overridden = of(h, 'route.overridden', turnId);
    expect(decided).toHaveLength(1);
    expect(overridden).toHaveLength(1);
    expect(overridden[0]!.id > decided[0]!.id).toBe(true);
    const stored = h.context.db
      .prepare('SELECT payload_json FROM events WHERE id = ?')
      .pluck()
      .get(decided[0]!.id) as string;
    expect(JSON.parse(stored)).toEqual(decidedLive!.payload);
    expect(overridden[0]).toMatchObject({
      actor: 'user',
      sensitivity: 'pseudonymous',
      payload: {
        original_chosen_model: WORSE,
        new_chosen_model: BETTER,
        deferred_policy: 'pattern',
        rule_name: 'slow-on-demo',
        pattern_confidence: 0.5,
      },
    });
    // Test 13: route.overridden's parent is the route.decided; the next llm.call_started's is the override.
    expect(overridden[0]!.parent_event_id).toBe(decided[0]!.id);
    const calls = of(h, 'llm.call_started', turnId);
    const after = calls.filter((c) => c.id > overridden[0]!.id);
    expect(after[0]!.parent_event_id).toBe(overridden[0]!.id);
    expect(after.every((c) => c.payload.model === BETTER)).toBe(true);
    // The cut call ends as a cancelled call; the turn itself completes, on the new model.
    const cut = of(h, 'llm.call_failed', turnId);
    expect(cut.map((e) => e.payload.error_class)).toEqual(['cancelled']);
    // The swap is told between the two calls: after the cut call closed, before the next started.
    expect(cut[0]!.id < overridden[0]!.id).toBe(true);
    expect(of(h, 'turn.completed', turnId)).toHaveLength(1);
    expect(of(h, 'turn.cancelled', turnId)).toHaveLength(0);
    // Applied: nothing is pending any more.
    expect(() => h.runtime.overrideRoute(session.id)).toThrow(/no pattern recommendation pending/);
  });

  it('a dismissed recommendation keeps the model; an override after the turn ended is refused, naming why', async () => {
    const h = startRuntime(PATTERNS);
    await buildUp(h);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const kept = h.runtime.submitTurn(session.id, 'slow: keep it');
    await until(() => of(h, 'text.delta', kept.turnId).length > 0, 'streaming');
    expect(h.runtime.dismissRecommendation(session.id)).toEqual({
      turn_id: kept.turnId,
      chosen_model: WORSE,
      dismissed_pattern_model: BETTER,
    });
    h.runtime.cancelTurn(session.id, kept.turnId);
    await h.settle(kept.done);
    const [dismissed] = of(h, 'pattern.override_dismissed');
    const [decided] = of(h, 'route.decided', kept.turnId);
    expect(dismissed).toMatchObject({
      turn_id: kept.turnId,
      actor: 'user',
      parent_event_id: decided!.id,
      payload: { chosen_model: WORSE, dismissed_pattern_model: BETTER, rule_name: 'slow-on-demo' },
    });
    expect(of(h, 'llm.call_started', kept.turnId).every((c) => c.payload.model === WORSE)).toBe(true);

    const late = h.runtime.submitTurn(session.id, 'slow: too late');
    await h.settle(late.done);
    expect(() => h.runtime.overrideRoute(session.id)).toThrow(
      /has ended: an override re-dispatches a running turn/,
    );
    // Dismissing still works until the next turn, outside the ended turn.
    h.runtime.dismissRecommendation(session.id);
    await h.context.flush();
    expect(of(h, 'pattern.override_dismissed').at(-1)!.turn_id).toBeNull();
    await h.settle(h.runtime.submitTurn(session.id, 'hello').done);
    expect(() => h.runtime.dismissRecommendation(session.id)).toThrow(/no pattern recommendation pending/);
  });
});
