import { describe, expect, it } from 'vitest';
import { liveTextWriter } from '../../src/client/live-text.js';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { recordExplicitFeedback } from '../../src/core/runtime/explicit-feedback.js';
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
  recordExplicitFeedback(h.context.bus, h.context.db, {
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
