import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CATALOG_ENTRIES } from '../../src/core/events/catalog/index.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 18, "Done when": over a real server's HTTP API and from the scripted model alone, a provider goes
 * out of routing and back, a broken then a fixed policy file is read, feedback and evals are recorded,
 * patterns build up until a recommendation is deferred behind a rule, one is applied and another
 * dismissed, the pattern store crosses its caps and is cleared. Every event type the issue names is
 * emitted at least once, with the parent and sensitivity the catalog gives.
 */

const POLICY_OK = 'rules:\n  - { name: slow-on-demo, match: "^slow:", model: "scripted:demo" }\n';
const POLICY_BAD =
  'rules:\n  - { name: ahead, match: "(?=ahead)", model: "scripted:x" }\n  - { name: "", match: a, model: nope }\n';

/** The types of this issue, and the types their parent may have (null: no parent). */
const PARENTS: Record<string, readonly (string | null)[]> = {
  'provider.degraded': ['llm.call_failed'],
  'routing.provider_unavailable': ['llm.call_failed'],
  'routing.provider_recovered': [null],
  'routing.policy_invalid': [null],
  'route.overridden': ['route.decided'],
  'pattern.override_dismissed': ['route.decided'],
  'pattern.recorded': ['session.ended'],
  'pattern.matched': ['route.decided'],
  'pattern.evicted': ['pattern.recorded', null],
  'feedback.explicit': ['turn.completed', 'turn.cancelled', 'session.ended', null],
  'feedback.implicit': ['turn.started', 'session.ended', null],
  'eval.started': ['turn.completed', 'turn.cancelled', 'session.ended', 'feedback.explicit'],
  'eval.completed': ['eval.started'],
  'eval.failed': ['eval.started'],
};

async function until(condition: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function driver(s: TestServer, all: MetisEvent[]) {
  s.context.writer.onCommit((batch) => all.push(...batch));
  const has = (type: string, where: (e: MetisEvent) => boolean = () => true) =>
    all.some((e) => e.type === type && where(e));
  const ended = (turnId: string) =>
    has('turn.completed', (e) => e.turn_id === turnId) || has('turn.cancelled', (e) => e.turn_id === turnId);
  const session = async (model?: string): Promise<string> =>
    (await s.request('POST', '/sessions', { workspace_path: s.workspace, ...(model ? { model } : {}) })).body
      .session_id;
  const turn = async (sessionId: string, message: string): Promise<string> => {
    const turnId = await s.submit(sessionId, message);
    await until(() => ended(turnId), `turn "${message}" to end`);
    return turnId;
  };
  const end = async (sessionId: string): Promise<void> => {
    const answer = await s.request('POST', `/sessions/${sessionId}/end`, {});
    expect(answer).toMatchObject({ status: 200, body: { status: 'ended', disposition: 'completed' } });
    await until(
      () => has('eval.completed', (e) => e.payload.subject_id === sessionId),
      'the session verdict',
    );
  };
  const learn = async (model: string, message: string): Promise<void> => {
    const id = await session(model);
    await turn(id, message);
    await end(id);
    await until(() => has('pattern.recorded', (e) => e.session_id === id), 'pattern.recorded');
  };
  return { has, session, turn, end, learn };
}

describe('a router that learns (issue 18, done when)', () => {
  it('drives every new event type from the scripted model, over HTTP', async () => {
    const policy = join(tempDir(), 'policy.yaml');
    writeFileSync(policy, POLICY_OK);
    const s = await startTestServer({
      routing_policy_file: policy,
      routing_policy_poll_ms: 20,
      provider_health: { degraded_failures: 2, consecutive_failures: 3, cooldown_seconds: 0.2 },
      patterns: { min_samples: 2, soft_cap_rows: 9, hard_cap_rows: 10 },
    });
    const all: MetisEvent[] = [];
    const { has, session, turn, end, learn } = driver(s, all);

    // A provider (here a model) out of routing after 3 failures, and back after its cool-down.
    const flaky = await session('scripted:flaky');
    for (let i = 0; i < 3; i += 1) await turn(flaky, 'fail: server_error');
    await until(() => has('routing.provider_unavailable'), 'routing.provider_unavailable');
    expect(has('provider.degraded')).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 250));
    const good = await turn(flaky, 'hello there');
    await until(() => has('routing.provider_recovered'), 'routing.provider_recovered');

    // Feedback: a rating, a retry; a rating of a turn the session never had is a 404 naming it.
    const rated = await s.request('POST', `/sessions/${flaky}/feedback`, {
      rating: 'thumbs_up',
      turn_id: good,
    });
    expect(rated.status).toBe(201);
    await turn(flaky, 'hello there');
    const unknown = await s.request('POST', `/sessions/${flaky}/feedback`, {
      rating: 'thumbs_down',
      turn_id: 'turn_nope',
    });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.message).toContain('turn_nope');
    await end(flaky);

    // A broken policy file is reported with every error and the last good rules stay; then a fixed one.
    const version = s.runtime.routing.version;
    writeFileSync(policy, POLICY_BAD);
    await until(() => has('routing.policy_invalid'), 'routing.policy_invalid');
    const invalid = all.find((e) => e.type === 'routing.policy_invalid')!;
    expect(invalid.payload.using_last_known_good).toBe(true);
    expect((invalid.payload.errors as string[]).length).toBeGreaterThanOrEqual(2);
    expect(s.runtime.routing.version).toBe(version);
    writeFileSync(policy, `${POLICY_OK}  - { name: never, match: "^zzz", model: "scripted:demo" }\n`);
    await until(() => s.runtime.routing.version !== version, 'the fixed policy');

    // Patterns: failures on demo, successes on smart, all turns of one shape.
    for (let i = 0; i < 2; i += 1) await learn('scripted:demo', 'fail: server_error');
    for (let i = 0; i < 2; i += 1) await learn('scripted:smart', 'hello there');

    // Slot 4 chooses when nothing earlier decided.
    const user = await session();
    const matchedTurn = await turn(user, 'good morning');
    expect(has('pattern.matched', (e) => e.turn_id === matchedTurn)).toBe(true);

    // Deferred behind the rule, then applied: bus §9.1 tests 12 and 13 over the wire.
    const applied = await s.submit(user, 'slow: tell me');
    await until(() => has('route.decided', (e) => e.turn_id === applied), 'route.decided');
    const override = await s.request('POST', `/sessions/${user}/route/override`);
    expect(override).toMatchObject({
      status: 200,
      body: { turn_id: applied, original_chosen_model: 'scripted:demo', new_chosen_model: 'scripted:smart' },
    });
    await until(() => has('turn.completed', (e) => e.turn_id === applied), 'the re-dispatched turn');
    const ofTurn = (type: string) => all.filter((e) => e.type === type && e.turn_id === applied);
    expect(ofTurn('route.decided')).toHaveLength(1);
    expect(ofTurn('route.overridden')).toHaveLength(1);
    const [overridden] = ofTurn('route.overridden');
    expect(overridden!.parent_event_id).toBe(ofTurn('route.decided')[0]!.id);
    const next = ofTurn('llm.call_started').find((e) => e.id > overridden!.id)!;
    expect(next).toMatchObject({ parent_event_id: overridden!.id, payload: { model: 'scripted:smart' } });

    // Another deferred recommendation, dismissed; then nothing is pending: 409 naming why.
    const keptTurn = await s.submit(user, 'slow: again');
    await until(() => has('route.decided', (e) => e.turn_id === keptTurn), 'route.decided');
    expect((await s.request('POST', `/sessions/${user}/route/dismiss`)).status).toBe(200);
    await s.request('POST', `/sessions/${user}/turns/${keptTurn}/cancel`, {});
    await until(() => has('turn.cancelled', (e) => e.turn_id === keptTurn), 'the cancel');
    const nothing = await s.request('POST', `/sessions/${user}/route/override`);
    expect(nothing.status).toBe(409);
    expect(nothing.body.error).toMatchObject({ code: 'METIS_ERR_NO_RECOMMENDATION' });
    expect(nothing.body.error.message).toMatch(/no pattern recommendation pending/);
    await end(user);

    // Over the soft cap (a signal), then over the hard cap (the oldest removed); then cleared by hand.
    for (let i = 0; i < 5; i += 1) await learn('scripted:smart', 'hello there');
    const evicted = () => all.filter((e) => e.type === 'pattern.evicted').map((e) => e.payload.trigger);
    expect(evicted()).toEqual(expect.arrayContaining(['soft_cap_signal', 'hard_cap_evict']));
    const cleared = await s.request('POST', '/patterns/clear');
    expect(cleared).toMatchObject({ status: 200, body: { entries_evicted: 9 } });
    await until(() => evicted().includes('manual_clear'), 'manual_clear');

    // An LLM judge whose answer does not parse: eval.failed (the scripted model echoes).
    const judged = await startTestServer({ evaluator: { judge_model: 'scripted:judge' } });
    const second = driver(judged, all);
    const lone = await second.session();
    await second.turn(lone, 'hello');
    expect((await judged.request('POST', `/sessions/${lone}/end`, {})).status).toBe(200);
    await until(() => second.has('eval.failed', (e) => e.session_id === lone), 'eval.failed');
    expect(all.find((e) => e.type === 'eval.failed')!.payload.failure_mode).toBe('judge_output_invalid');

    // Every type at least once, each with a parent and a sensitivity the catalog allows.
    const byId = new Map(all.map((e) => [e.id, e]));
    for (const [type, parents] of Object.entries(PARENTS)) {
      const events = all.filter((e) => e.type === type);
      expect(events.length, `${type} emitted`).toBeGreaterThan(0);
      const entry = CATALOG_ENTRIES.find((c) => c.type === type)!;
      for (const event of events) {
        const parentType =
          event.parent_event_id === null ? null : (byId.get(event.parent_event_id)?.type ?? '?');
        expect(parents, `${type} parent`).toContain(parentType);
        const floor = entry.resolveSensitivity
          ? entry.resolveSensitivity(event.payload as never)
          : entry.sensitivity;
        const allowed = type === 'feedback.explicit' && event.payload.comment !== null ? 'private' : floor;
        expect(event.sensitivity, `${type} sensitivity`).toBe(allowed);
      }
    }
  }, 90_000);
});
