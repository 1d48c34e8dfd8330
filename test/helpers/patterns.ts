import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import type { RuntimeHarness } from './runtime.js';

export const WORSE = 'scripted:demo';
export const BETTER = 'scripted:smart';

/** Pattern routing after 2 samples; short messages starting "slow:" go to the worse model by rule. */
export const PATTERN_CONFIG: RuntimeConfigInput = {
  patterns: { min_samples: 2 },
  routing_rules: [{ name: 'slow-on-demo', match: '^slow:', model: WORSE }],
};

/** One session on `model` with one turn of `message`, ended and scored: one outcome recorded. */
export async function learn(h: RuntimeHarness, model: string, message: string): Promise<void> {
  const session = h.runtime.createSession({ workspacePath: h.workspace, model });
  await h.settle(h.runtime.submitTurn(session.id, message).done);
  h.runtime.endSession(session.id);
  await h.context.flush();
  await h.runtime.evaluator!.settled();
  await h.context.flush();
}

/** Two failed turns on the worse model and two good ones on the better, all of one fingerprint. */
export async function buildUpPatterns(h: RuntimeHarness): Promise<void> {
  for (let i = 0; i < 2; i += 1) await learn(h, WORSE, 'fail: server_error');
  for (let i = 0; i < 2; i += 1) await learn(h, BETTER, 'hello there');
}

export async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i += 1) await new Promise((resolve) => setTimeout(resolve, 10));
  if (!condition()) throw new Error(`timed out waiting for ${what}`);
}
