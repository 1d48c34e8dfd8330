import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { startRuntime } from '../helpers/runtime.js';

/**
 * Issue 18 point 1: provider health from the calls the runtime makes (bus §6.4), driven without an API
 * key by the scripted model's `fail: <class>` turns.
 */

const HEALTH = {
  degraded_failures: 2,
  window_seconds: 60,
  consecutive_failures: 3,
  failing_models: 2,
  cooldown_seconds: 0.4,
};

function harness(health: Partial<typeof HEALTH> = {}) {
  const h = startRuntime({ provider_health: { ...HEALTH, ...health } });
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  const turn = async (message: string, model?: string) => {
    const { turnId, done } = h.runtime.submitTurn(session.id, message, model ? { model } : {});
    await h.settle(done);
    return turnId;
  };
  const ofType = (type: string): MetisEvent[] => h.frames.filter((e) => e.type === type);
  return { h, session, turn, ofType };
}

describe('provider health', () => {
  it('degraded, then unavailable after consecutive failures; routing rejects the model; a probe after the cool-down recovers it', async () => {
    const { h, turn, ofType } = harness();
    await turn('fail: server_error');
    expect(ofType('provider.degraded')).toEqual([]);
    await turn('fail: server_error');
    const [degraded] = ofType('provider.degraded');
    expect(degraded).toMatchObject({
      payload: { provider: 'scripted', recent_failure_count: 2, window_seconds: 60 },
      parent_event_id: ofType('llm.call_failed')[1]!.id,
    });
    await turn('fail: server_error');
    const [unavailable] = ofType('routing.provider_unavailable');
    expect(unavailable).toMatchObject({
      payload: {
        provider: 'scripted',
        scope: 'model_specific',
        models_affected: ['scripted:demo'],
        trigger_reason: '3_consecutive_failures',
      },
      parent_event_id: ofType('llm.call_failed')[2]!.id,
    });

    // Routing now rejects it, naming why; the turn makes no model call.
    expect(h.runtime.models.resolve('scripted:demo')).toMatchObject({
      ok: false,
      failure: 'provider_unavailable',
      detail: expect.stringMatching(
        /scripted:demo is unavailable \(3_consecutive_failures\); next probe in 1 s/,
      ),
    });
    const rejected = await turn('hello');
    expect(ofType('turn.started').some((e) => e.turn_id === rejected)).toBe(true);
    expect(ofType('llm.call_started').filter((e) => e.turn_id === rejected)).toEqual([]);

    // After the cool-down one call probes it; its success recovers the model.
    await new Promise((resolve) => setTimeout(resolve, HEALTH.cooldown_seconds * 1000 + 50));
    const probe = await turn('hello');
    expect(ofType('llm.call_completed').some((e) => e.turn_id === probe)).toBe(true);
    const [recovered] = ofType('routing.provider_recovered');
    expect(recovered).toMatchObject({
      payload: { provider: 'scripted', scope: 'model_specific', models_recovered: ['scripted:demo'] },
    });
    expect(recovered!.payload.downtime_seconds as number).toBeGreaterThanOrEqual(HEALTH.cooldown_seconds);
    expect(ofType('routing.provider_unavailable')).toHaveLength(1);
  });

  it('an auth error makes the whole provider unavailable at once; cancels and refused requests do not count', async () => {
    const { turn, ofType } = harness();
    await turn('fail: invalid_request');
    await turn('fail: context_overflow');
    await turn('fail: invalid_request');
    expect(ofType('routing.provider_unavailable')).toEqual([]);
    expect(ofType('provider.degraded')).toEqual([]);
    await turn('fail: auth');
    expect(ofType('routing.provider_unavailable').map((e) => e.payload)).toEqual([
      {
        provider: 'scripted',
        scope: 'provider_wide',
        models_affected: ['scripted:demo'],
        trigger_reason: 'auth_error',
      },
    ]);
  });

  it('a probe that fails waits another cool-down, with no second announcement', async () => {
    const { turn, ofType } = harness();
    await turn('fail: auth');
    await new Promise((resolve) => setTimeout(resolve, HEALTH.cooldown_seconds * 1000 + 50));
    const probe = await turn('fail: auth');
    expect(ofType('llm.call_failed').filter((e) => e.turn_id === probe)).toHaveLength(1);
    const blocked = await turn('hello');
    expect(ofType('llm.call_started').filter((e) => e.turn_id === blocked)).toEqual([]);
    expect(ofType('routing.provider_unavailable')).toHaveLength(1);
    expect(ofType('routing.provider_recovered')).toEqual([]);
  });

  it('several models of one provider failing at once take the whole provider out', async () => {
    const { h, turn, ofType } = harness({ consecutive_failures: 5 });
    for (let i = 0; i < 3; i += 1) await turn('fail: rate_limit', 'scripted:demo');
    expect(ofType('routing.provider_unavailable')).toEqual([]);
    for (let i = 0; i < 3; i += 1) await turn('fail: rate_limit', 'scripted:other');
    expect(ofType('routing.provider_unavailable').map((e) => e.payload)).toEqual([
      {
        provider: 'scripted',
        scope: 'provider_wide',
        models_affected: ['scripted:demo', 'scripted:other'],
        trigger_reason: 'multi_model_failures',
      },
    ]);
    expect(h.runtime.models.resolve('scripted:third')).toMatchObject({
      ok: false,
      failure: 'provider_unavailable',
    });
  });
});
