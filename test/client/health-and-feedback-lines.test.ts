import { describe, expect, it } from 'vitest';
import { liveTextWriter } from '../../src/client/live-text.js';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { recordExplicitFeedback } from '../../src/core/runtime/explicit-feedback.js';
import { BETTER, buildUpPatterns, PATTERN_CONFIG, until, WORSE } from '../helpers/patterns.js';
import { startRuntime } from '../helpers/runtime.js';

/**
 * Issue 18 point 8: `tail --preset full` shows health changes and feedback; the chat view does not.
 * Real events from a runtime: three failed calls take the scripted model out of routing, a probe after
 * the cool-down brings it back, the user rates the turn, and a retry is noticed.
 */
async function sessionFrames(): Promise<Frame[]> {
  const h = startRuntime({
    provider_health: { degraded_failures: 2, consecutive_failures: 3, cooldown_seconds: 0.2 },
  });
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  const turn = async (message: string) => {
    const { turnId, done } = h.runtime.submitTurn(session.id, message);
    await h.settle(done);
    return turnId;
  };
  for (let i = 0; i < 3; i += 1) await turn('fail: server_error');
  await new Promise((resolve) => setTimeout(resolve, 250));
  const good = await turn('hello there');
  await recordExplicitFeedback(h.context.bus, h.context.store.lookups, {
    sessionId: session.id,
    rating: 'thumbs_up',
    turnId: good,
    comment: 'nice',
  });
  await turn('hello there');
  await h.context.flush();
  return h.framesOf(session.id).map((event) => ({ type: 'event', event }) as Frame);
}

function render(frames: readonly Frame[], detailed: boolean): string {
  let text = '';
  const sessionId = frames[0]!.event.session_id as string;
  const write = liveTextWriter(sessionId, {
    out: { isTTY: false, write: (t: string) => (text += t) },
    env: { NO_COLOR: '1' },
    detailed,
  });
  let state = initialState;
  for (const frame of frames) {
    state = reduce(state, frame);
    write({ kind: 'frame', frame }, state);
  }
  return text;
}

describe('health and feedback lines', () => {
  it('the detailed view names each change; the chat view shows none of them', async () => {
    const frames = await sessionFrames();
    const full = render(frames, true);
    expect(full).toContain('! scripted degraded: 2 failures in 60 s');
    expect(full).toContain('✗ scripted:demo out of routing (3_consecutive_failures)');
    expect(full).toMatch(/✓ scripted:demo back in routing after \d+ s/);
    expect(full).toMatch(/👍 turn turn_[0-9A-Z]+: nice/);
    expect(full).toMatch(/signal: retry of turn turn_[0-9A-Z]+ \(confidence 0\.95\)/);
    const chat = render(frames, false);
    for (const line of ['degraded', 'out of routing', 'back in routing', '👍', 'signal:'])
      expect(chat).not.toContain(line);
  });
});

describe('pattern routing lines', () => {
  it('a deferred recommendation is shown with the command that applies it; the rest in the detailed view', async () => {
    const h = startRuntime(PATTERN_CONFIG);
    await buildUpPatterns(h);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(session.id, 'good morning').done);
    const { turnId, done } = h.runtime.submitTurn(session.id, 'slow: tell me');
    await until(() => h.frames.some((e) => e.type === 'text.delta' && e.turn_id === turnId), 'streaming');
    h.runtime.overrideRoute(session.id);
    await h.settle(done);
    h.runtime.endSession(session.id);
    await h.context.flush();
    await h.runtime.evaluator!.settled();
    await h.context.flush();
    const frames = h.framesOf(session.id).map((event) => ({ type: 'event', event }) as Frame);

    const chat = render(frames, false);
    expect(chat).toContain(
      `pattern suggests ${BETTER} (similar turns scored 1 on ${BETTER} (n=2) vs 0 on ${WORSE} (n=2), confidence 0.5): metis route override ${session.id}`,
    );
    expect(chat).toContain(`↪ ${WORSE} → ${BETTER} (pattern recommendation applied)`);
    for (const detail of ['pattern chose', 'learned:', 'eval of']) expect(chat).not.toContain(detail);
    const full = render(frames, true);
    expect(full).toContain(`pattern chose ${BETTER} (2 similar turns, confidence 0.5)`);
    expect(full).toMatch(new RegExp(`eval of turn ${turnId}: 1 \\(confidence 0\\.5, heuristic\\)`));
    expect(full).toMatch(/eval of session sess_[0-9A-Z]+: 1 \(confidence 0\.6, heuristic\)/);
    expect(full).toMatch(new RegExp(`learned: ${BETTER} scored 1 on fp_[0-9A-Z]+ \\(3 samples\\)`));
  });
});
