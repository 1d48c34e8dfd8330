import { describe, expect, it } from 'vitest';
import { eventually, ofType, subscribe, waitForEvents } from '../helpers/protocol.js';
import { expectCatalogShape } from '../helpers/scripted-turn.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 31 part 3: budgets that pause. A dollar a token makes each call's cost its token count, so the
 * caps below are crossed by whole calls.
 */
const DOLLAR_A_TOKEN = {
  pricing: { 'scripted:*': { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } },
};

async function trace(t: TestServer, sessionId: string): Promise<any[]> {
  return (await t.request('GET', `/sessions/${sessionId}/trace?include_worker_sessions=true`)).body.events;
}

const budgetOf = async (t: TestServer, id: string) => (await t.request('GET', `/sessions/${id}/budget`)).body;

describe('budgets that pause (issue 31)', () => {
  it('a tree cap pauses the delegated turn before its first model call; a raise resumes it', async () => {
    const t = await startTestServer(DOLLAR_A_TOKEN);
    const created = await t.request('POST', '/sessions', {
      workspace_path: t.workspace,
      budget: { scope: 'tree', usd: 1 },
    });
    expect(created.status).toBe(201);
    const root = created.body.session_id as string;
    const ws = (await subscribe(t, root)).client;
    const turnId = await t.submit(root, 'delegate: count the stars');

    let budget: any = null;
    expect(
      await eventually(() => {
        void budgetOf(t, root).then((b) => {
          budget = b;
        });
        return budget?.paused?.length === 1;
      }),
    ).toBe(true);
    const [paused] = budget.paused;
    expect(paused).toMatchObject({ scope: 'tree', budget_session_id: root, measure: 'usd', cap: 1 });
    expect(paused.session_id).not.toBe(root);
    expect(paused.spent).toBeGreaterThanOrEqual(1);
    expect(budget.tree).toMatchObject({ root_session_id: root, caps: { usd: 1, tokens: null } });
    const worker = paused.session_id as string;

    // Held, not ended: the planner's turn is still in flight, and the worker made no model call.
    expect((await t.request('GET', `/sessions/${root}`)).body.session.current_turn_id).toBe(turnId);
    await t.context.flush();
    const held = await trace(t, root);
    expect(held.filter((e) => e.session_id === worker && e.type === 'llm.call_started')).toEqual([]);
    expect(held.some((e) => e.type === 'turn.completed' || e.type === 'turn.cancelled')).toBe(false);
    // Every client sees why and how much: the snapshot carries the budget with the paused turn.
    const late = await subscribe(t, root);
    expect(late.snapshot.session.current_turn_id).toBe(turnId);
    expect(late.snapshot.budget.paused).toMatchObject([{ session_id: worker, cap: 1, measure: 'usd' }]);

    // quota.alert at 80 % and at the cap, in the catalog's shape, parentless, in the budget's session.
    const alerts = ofType(held, 'quota.alert');
    expect(alerts.map((a) => a.payload.threshold_pct)).toEqual([80, 100]);
    for (const alert of alerts) {
      expect(alert.session_id).toBe(root);
      expect(expectCatalogShape(alert, held)).toBeUndefined();
      expect(alert.parent_event_id).toBeNull();
      expect(alert.actor).toBe('system');
      expect(alert.payload).toMatchObject({ cap_usd: '1', gateway_key_id: null, user_id: null });
      expect(Number(alert.payload.spent_usd)).toBeGreaterThanOrEqual(1);
    }

    const raised = await t.request('POST', `/sessions/${root}/budget`, { scope: 'tree', usd: 1_000_000 });
    expect(raised.status).toBe(200);
    expect(raised.body.paused).toEqual([]);
    await waitForEvents(ws, (e) => e.type === 'turn.completed' && e.turn_id === turnId);
    await t.context.flush();
    const after = await trace(t, root);
    expect(after.filter((e) => e.session_id === worker && e.type === 'llm.call_completed').length).toBe(1);
    expect(ofType(after, 'delegate.completed').length).toBe(1);
    expect(ofType(after, 'quota.alert').length).toBe(2);
  }, 30_000);

  it('runtime.budgets caps every new session; a call cut short is counted as billed (an estimate)', async () => {
    const t = await startTestServer({
      budgets: { session: { tokens: 1 } },
      scripted: { slow_token_delay_ms: 10, slow_tokens: 200 },
    });
    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    // `time` makes two calls: the configured 1-token cap holds the second.
    await t.submit(id, 'time');
    expect(await eventually(() => t.runtime.budgets.view(id).paused.length === 1)).toBe(true);
    const budget = await budgetOf(t, id);
    expect(budget.session.caps).toEqual({ usd: null, tokens: 1 });
    expect(budget.paused[0]).toMatchObject({ scope: 'session', measure: 'tokens', cap: 1 });
    await t.request('POST', `/sessions/${id}/budget`, { tokens: null });
    await waitForEvents(ws, (e) => e.type === 'turn.completed');

    // A cancelled call has no usage from the provider, which bills it all the same.
    const cut = await t.createSession();
    const cutWs = (await subscribe(t, cut)).client;
    await t.request('POST', `/sessions/${cut}/budget`, { tokens: 1_000_000 });
    const turnId = await t.submit(cut, 'slow: a story to cut');
    await waitForEvents(cutWs, (e) => e.type === 'text.delta', 5);
    await t.request('POST', `/sessions/${cut}/turns/${turnId}/cancel`, {});
    await waitForEvents(cutWs, (e) => e.type === 'turn.cancelled');
    const spent = (await budgetOf(t, cut)).session;
    expect(spent.spent_tokens).toBeGreaterThan(0);
    expect(spent.spent_usd).toBeGreaterThan(0);
  }, 30_000);

  it('quota.alert at 80 % alone; at the cap the next turn waits, and ending the session ends it', async () => {
    const t = await startTestServer(DOLLAR_A_TOKEN);
    // What one plain call costs here: its tokens, at a dollar each.
    const probe = await t.createSession();
    const probeWs = (await subscribe(t, probe)).client;
    await t.submit(probe, 'hello there');
    await waitForEvents(probeWs, (e) => e.type === 'llm.call_completed');
    const cost = ofType(probeWs.events(), 'llm.call_completed')[0].payload.cost_usd as number;
    expect(cost).toBeGreaterThan(0);

    const id = await t.createSession();
    const ws = (await subscribe(t, id)).client;
    const cap = Math.round((cost / 0.85) * 1e6) / 1e6;
    const first = await t.request('POST', `/sessions/${id}/turns`, {
      message: 'hello there',
      budget: { usd: cap },
    });
    expect(first.body.turn_id).toMatch(/^turn_/);
    await waitForEvents(ws, (e) => e.type === 'turn.completed');
    await t.context.flush();
    let events = await trace(t, id);
    expect(ofType(events, 'quota.alert').map((a) => a.payload.threshold_pct)).toEqual([80]);

    // Under the cap when it starts: the call runs whole, and crosses it.
    await t.submit(id, 'and again');
    await waitForEvents(ws, (e) => e.type === 'turn.completed', 2);
    // At the cap: the next turn starts and waits before its first model call.
    const third = await t.submit(id, 'one more');
    expect(await eventually(() => t.runtime.budgets.view(id).paused.length === 1)).toBe(true);
    const queued = await t.request('POST', `/sessions/${id}/turns`, {
      message: 'later',
      multitask: 'enqueue',
    });
    expect(queued.body.status).toBe('queued');
    const ended = await t.request('POST', `/sessions/${id}/end`, {});
    expect(ended.status).toBe(200);
    await t.context.flush();
    events = await trace(t, id);
    expect(ofType(events, 'quota.alert').map((a) => a.payload.threshold_pct)).toEqual([80, 100]);
    const thirdEvents = events.filter((e) => e.turn_id === third);
    expect(thirdEvents.map((e) => e.type)).toEqual(['turn.started', 'route.decided', 'turn.cancelled']);
    expect(ofType(thirdEvents, 'turn.cancelled')[0].payload.reason).toBe('user_cancel');
    const sessionEnded = ofType(events, 'session.ended')[0];
    expect(sessionEnded.id > ofType(thirdEvents, 'turn.cancelled')[0].id).toBe(true);
    // The queued message went with the session: no turn of it.
    expect(ofType(events, 'turn.started').length).toBe(3);
    expect((await t.request('GET', `/sessions/${id}/queue`)).body.queue).toEqual([]);
  }, 30_000);
});
