import { describe, expect, it } from 'vitest';
import { CATALOG_ENTRIES } from '../../src/core/events/catalog/index.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { Judge } from '../../src/core/runtime/evaluator/judge.js';
import { recordExplicitFeedback } from '../../src/core/runtime/explicit-feedback.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { startRuntime } from '../helpers/runtime.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { tempTraceContext } from '../helpers/tmp.js';

/** Issue 18 point 4: the heuristic evaluator scores turns and sessions from their events (bus §6.12). */

function evals(frames: readonly MetisEvent[], sessionId: string): MetisEvent[] {
  return frames
    .filter((e) => e.session_id === sessionId && e.type.startsWith('eval.'))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
}

describe('heuristic evaluator', () => {
  it('scores each turn and the session when the session ends, the turns rolled up into the session', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const good = h.runtime.submitTurn(session.id, 'hello');
    await h.settle(good.done);
    const failed = h.runtime.submitTurn(session.id, 'fail: server_error');
    await h.settle(failed.done);
    h.runtime.endSession(session.id, 'completed');
    await h.runtime.evaluator!.settled();
    await h.context.flush();

    const events = evals(h.frames, session.id);
    expect(events.map((e) => [e.type, e.payload.subject_kind])).toEqual([
      ['eval.started', 'session'],
      ['eval.started', 'turn'],
      ['eval.completed', 'turn'],
      ['eval.started', 'turn'],
      ['eval.completed', 'turn'],
      ['eval.completed', 'session'],
    ]);
    const ended = h.frames.find((e) => e.session_id === session.id && e.type === 'session.ended')!;
    const endOf = (turnId: string) =>
      h.frames.find((e) => e.turn_id === turnId && e.type === 'turn.completed')!.id;
    const [sessionStart, goodStart, goodDone, failedStart, failedDone, sessionDone] = events as [
      MetisEvent,
      MetisEvent,
      MetisEvent,
      MetisEvent,
      MetisEvent,
      MetisEvent,
    ];
    expect(sessionStart.parent_event_id).toBe(ended.id);
    expect(sessionStart.payload).toMatchObject({
      subject_id: session.id,
      judge_kind_planned: 'heuristic',
      trigger: 'batch',
      rubric_id: 'metis.outcome',
    });
    expect(goodStart.parent_event_id).toBe(endOf(good.turnId));
    expect(failedStart.parent_event_id).toBe(endOf(failed.turnId));
    expect(goodDone.parent_event_id).toBe(goodStart.id);
    expect(goodDone.payload).toMatchObject({
      subject_id: good.turnId,
      score: 1,
      judge_kind: 'heuristic',
      judge_model: null,
      judge_cost_usd: '0',
      judge_pricing_version: null,
      parent_eval_id: sessionStart.payload.eval_id,
      signals: { outcome: 'completed', failed_calls: 0 },
    });
    expect(failedDone.payload).toMatchObject({
      subject_id: failed.turnId,
      score: 0,
      signals: { outcome: 'failed', failed_calls: 1 },
    });
    expect(sessionDone.payload).toMatchObject({ subject_id: session.id, score: 0.5, parent_eval_id: null });
    for (const event of events) {
      expect(event.turn_id).toBeNull();
      expect(event.actor).toBe('system');
    }
    // A heuristic verdict carries no rationale: recorded below the catalog's floor (§4.4.1).
    expect(goodDone.sensitivity).toBe('pseudonymous');
    expect(CATALOG_ENTRIES.find((c) => c.type === 'eval.completed')!.sensitivity).toBe('user_controlled');
  });

  it('a retry lowers the turn it retries; a rating arriving later scores the turn again, the old verdict kept', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const first = h.runtime.submitTurn(session.id, 'What is the weather in Paris today?');
    await h.settle(first.done);
    const second = h.runtime.submitTurn(session.id, 'what is the weather in paris today');
    await h.settle(second.done);
    h.runtime.endSession(session.id, 'completed');
    await h.runtime.evaluator!.settled();
    await h.context.flush();
    const scoreOf = (turnId: string) =>
      evals(h.frames, session.id)
        .filter((e) => e.type === 'eval.completed' && e.payload.subject_id === turnId)
        .map((e) => e.payload.score as number);
    const [retried] = scoreOf(first.turnId);
    expect(retried).toBeLessThan(0.6);
    expect(scoreOf(second.turnId)).toEqual([1]);

    const rating = await recordExplicitFeedback(h.context.bus, h.context.store.lookups, {
      sessionId: session.id,
      rating: 'thumbs_up',
      turnId: first.turnId,
      comment: null,
    });
    await h.context.flush();
    await h.runtime.evaluator!.settled();
    await h.context.flush();
    expect(scoreOf(first.turnId)).toEqual([retried, 1]);
    // The latest rating decides: 👍 then 👎 scores the turn 0.
    await recordExplicitFeedback(h.context.bus, h.context.store.lookups, {
      sessionId: session.id,
      rating: 'thumbs_down',
      turnId: first.turnId,
      comment: null,
    });
    await h.context.flush();
    await h.runtime.evaluator!.settled();
    await h.context.flush();
    expect(scoreOf(first.turnId)).toEqual([retried, 1, 0]);
    const again = evals(h.frames, session.id).filter((e) => e.parent_event_id === rating.id);
    expect(again.map((e) => [e.type, e.payload.trigger])).toEqual([['eval.started', 'feedback_arrived']]);
    const verdicts = evals(h.frames, session.id).filter((e) => e.type === 'eval.completed');
    expect(new Set(verdicts.map((e) => e.payload.eval_id)).size).toBe(verdicts.length);
  });

  it('a judge that fails gives eval.failed with its reason; a worker session is not scored on its own', async () => {
    const context = tempTraceContext();
    const frames: MetisEvent[] = [];
    context.writer.onCommit((batch) => frames.push(...batch));
    const failing: Judge = {
      kind: 'llm',
      model: 'scripted:judge',
      rubricId: 'test.rubric',
      rubricVersion: '1',
      judgeTurn: () => {
        throw new Error('judge provider answered 503');
      },
      judgeSession: () => ({ score: 0.5, confidence: 0.1, signals: {} }),
    };
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      config: testRuntimeConfig(),
      judge: failing,
    });
    try {
      const session = runtime.createSession();
      await runtime.submitTurn(session.id, 'hello').done;
      runtime.endSession(session.id);
      await context.flush();
      await runtime.evaluator!.settled();
      await context.flush();
      const failed = evals(frames, session.id).find((e) => e.type === 'eval.failed')!;
      expect(failed.payload).toMatchObject({
        subject_kind: 'turn',
        failure_mode: 'judge_call_failed',
        error_message: 'judge provider answered 503',
      });
      expect(evals(frames, session.id).filter((e) => e.type === 'eval.completed')).toHaveLength(1);

      const planner = runtime.createSession();
      await runtime.submitTurn(planner.id, 'delegate: say hi').done;
      runtime.endSession(planner.id);
      await context.flush();
      await runtime.evaluator!.settled();
      await context.flush();
      const workers = new Set(
        frames.filter((e) => e.type === 'delegate.started').map((e) => e.payload.worker_session_id),
      );
      expect(workers.size).toBe(1);
      expect(frames.filter((e) => workers.has(e.session_id) && e.type.startsWith('eval.'))).toEqual([]);
    } finally {
      await runtime.close();
    }
  });

  it('runtime.evaluator.enabled: false scores nothing', async () => {
    const h = startRuntime({ evaluator: { enabled: false } });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(session.id, 'hello').done);
    h.runtime.endSession(session.id);
    await h.context.flush();
    expect(h.runtime.evaluator).toBeNull();
    expect(evals(h.frames, session.id)).toEqual([]);
  });
});
