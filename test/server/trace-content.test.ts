import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Rig, startRig } from './trace-api-rig.js';

/**
 * Issue 30 (a span tree with content): GET /sessions/{id}/trace gives, beside the events, what each span
 * shows (the user's message, the model's text and thinking, the tool's input and output, the route and
 * its alternatives, retries, cost), keyed by the event that opens the span, and the session's scores.
 * `server.dashboard_content: redacted` hides what is more private than pseudonymous.
 */
const entriesOf = (body: any, kind: string) =>
  Object.entries(body.content as Record<string, any>).filter(([, entry]) => entry.kind === kind);

describe('GET /sessions/{id}/trace: the content of each span', () => {
  let rig: Rig;
  let sessionId: string;
  let turnId: string;
  let failedTurn: string;

  beforeAll(async () => {
    rig = await startRig();
    sessionId = await rig.createSession();
    turnId = await rig.runTurn(sessionId, 'think: time');
    failedTurn = await rig.runTurn(sessionId, 'fail: server_error');
    await rig.request('POST', `/sessions/${sessionId}/feedback`, {
      rating: 'thumbs_down',
      turn_id: turnId,
      comment: 'too slow',
    });
    await rig.context.flush();
  }, 30_000);
  afterAll(async () => rig?.close());

  it('gives the turn, its route, its model calls and its tool call, each under the event that opens it', async () => {
    const { status, body } = await rig.request('GET', `/sessions/${sessionId}/trace`);
    expect(status).toBe(200);
    expect(body.content_mode).toBe('full');
    const events = body.events as any[];
    const started = events.find((e) => e.type === 'turn.started' && e.turn_id === turnId);
    const turn = body.content[started.id];
    expect(turn).toMatchObject({
      kind: 'turn',
      turn_id: turnId,
      user_message: 'think: time',
      status: 'completed',
      parent_span_id: null,
      model: 'scripted:demo',
      model_call_count: 2,
      tool_call_count: 1,
    });
    expect(turn.end_event_id).toBe(
      events.find((e) => e.type === 'turn.completed' && e.turn_id === turnId).id,
    );
    expect(turn.duration_ms).toBeGreaterThanOrEqual(0);
    const route = body.content[turn.route_event_id];
    expect(route).toMatchObject({ kind: 'route', chosen_model: 'scripted:demo', parent_span_id: started.id });
    expect(route.alternatives.length).toBeGreaterThan(0);
    expect(route.alternatives.some((a: any) => a.verdict === 'chose')).toBe(true);

    const calls = entriesOf(body, 'model_call').filter(([, c]) => c.turn_id === turnId);
    expect(calls).toHaveLength(2);
    const [[firstId, first], [, second]] = calls as [[string, any], [string, any]];
    expect(first).toMatchObject({
      parent_span_id: started.id,
      status: 'completed',
      stop_reason: 'tool_use',
      retries: 0,
    });
    expect(first.output.thinking).toContain('The user asks: time');
    expect(first.output.text).toBe('Let me check the time.');
    expect(first.output.tool_uses).toEqual([{ tool_use_id: expect.any(String), tool_name: 'current_time' }]);
    expect(first.input_message_count).toBe(1);
    expect(second.output.text).toContain('The tool returned');
    expect(second.input_message_count).toBe(3);
    const stored = events.filter((e) => e.type === 'llm.call_completed' && e.turn_id === turnId);
    expect(first.input_tokens).toBe(stored[0].payload.input_tokens);
    expect(turn.cost_usd).toBeCloseTo(
      stored.reduce((sum: number, e: any) => sum + e.payload.cost_usd, 0),
      12,
    );

    const [[toolId, tool]] = entriesOf(body, 'tool_call') as [[string, any]];
    expect(events.find((e) => e.id === toolId).type).toBe('tool.called');
    expect(tool).toMatchObject({
      parent_span_id: firstId,
      tool_name: 'current_time',
      tool_use_id: first.output.tool_uses[0].tool_use_id,
      input: {},
      status: 'completed',
      error_class: null,
    });
    expect(JSON.stringify(tool.output)).toMatch(/\d{4}-\d{2}-\d{2}/);
  });

  it('marks a failed turn and its failed model call, with the error', async () => {
    const { body } = await rig.request('GET', `/sessions/${sessionId}/trace`);
    const turn = Object.values(body.content as Record<string, any>).find(
      (entry) => entry.kind === 'turn' && entry.turn_id === failedTurn,
    );
    expect(turn).toMatchObject({ status: 'failed', user_message: 'fail: server_error' });
    const [[, call]] = entriesOf(body, 'model_call').filter(([, c]) => c.turn_id === failedTurn) as [
      [string, any],
    ];
    expect(call).toMatchObject({ status: 'failed', error_class: 'server_error' });
    expect(call.error_message).toContain('scripted failure');
  });

  it('keeps each entry whole when the span ends on a later page, and gives only the page’s spans', async () => {
    const all = (await rig.request('GET', `/sessions/${sessionId}/trace`)).body;
    const started = all.events.find((e: any) => e.type === 'turn.started' && e.turn_id === turnId);
    const upTo = all.events.findIndex((e: any) => e.id === started.id);
    const page = (await rig.request('GET', `/sessions/${sessionId}/trace?limit=${upTo + 1}`)).body;
    expect(page.has_more).toBe(true);
    expect(Object.keys(page.content)).toEqual([started.id]);
    expect(page.content[started.id]).toEqual(all.content[started.id]);
    const rest = (await rig.request('GET', `/sessions/${sessionId}/trace?after=${started.id}`)).body;
    expect(rest.content[started.id]).toBeUndefined();
    expect(rest.scores).toEqual([]);
  });

  it('gives the scores, feedback and the eval verdict it set off: in the trace and at /scores', async () => {
    // The evaluator judges the rated turn after the feedback lands (feedback_arrived).
    let scores = await rig.request('GET', `/sessions/${sessionId}/scores`);
    for (let i = 0; i < 100 && scores.body.summary.eval_count === 0; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      scores = await rig.request('GET', `/sessions/${sessionId}/scores`);
    }
    expect(scores.status).toBe(200);
    expect(scores.body.summary).toEqual({
      thumbs_up: 0,
      thumbs_down: 1,
      eval_count: 1,
      eval_mean: expect.any(Number),
    });
    const { body } = await rig.request('GET', `/sessions/${sessionId}/trace`);
    expect(body.scores).toEqual([
      expect.objectContaining({
        source: 'feedback',
        scope: 'turn',
        turn_id: turnId,
        value: 0,
        label: 'thumbs_down',
        comment: 'too slow',
      }),
      expect.objectContaining({
        source: 'eval',
        scope: 'turn',
        turn_id: turnId,
        label: 'metis.outcome',
        judge: 'heuristic',
      }),
    ]);
    expect(body.scores).toEqual(scores.body.scores);
    expect((await rig.request('GET', '/sessions/sess_nope/scores')).status).toBe(404);
  });

  it("places a worker's turn under the delegate tool call that started it", async () => {
    const planner = await rig.createSession();
    await rig.runTurn(planner, 'delegate: count the files');
    await new Promise((resolve) => setTimeout(resolve, 50));
    await rig.context.flush();
    const { body } = await rig.request('GET', `/sessions/${planner}/trace?include_worker_sessions=true`);
    const delegate = entriesOf(body, 'tool_call').find(([, t]) => t.tool_name === 'delegate') as [
      string,
      any,
    ];
    expect(delegate[1].worker_session_id).toEqual(expect.any(String));
    const workerTurn = entriesOf(body, 'turn').find(
      ([, t]) => t.session_id === delegate[1].worker_session_id,
    );
    expect(workerTurn?.[1].parent_span_id).toBe(delegate[0]);
  });
});

describe('server.dashboard_content: redacted', () => {
  let rig: Rig;
  let sessionId: string;
  beforeAll(async () => {
    rig = await startRig({}, { dashboardContent: 'redacted' });
    sessionId = await rig.createSession();
    await rig.runTurn(sessionId, 'think: time');
    await rig.request('POST', `/sessions/${sessionId}/feedback`, { rating: 'thumbs_up', comment: 'nice' });
  }, 30_000);
  afterAll(async () => rig?.close());

  it('replaces private text, output and tool data with their length, and keeps the rest', async () => {
    const { body } = await rig.request('GET', `/sessions/${sessionId}/trace`);
    expect(body.content_mode).toBe('redacted');
    const [[, turn]] = entriesOf(body, 'turn') as [[string, any]];
    expect(turn.user_message).toEqual({ redacted: true, chars: 'think: time'.length });
    expect(turn.model).toBe('scripted:demo');
    const [[, first]] = entriesOf(body, 'model_call') as [[string, any]];
    expect(first.output.text).toEqual({ redacted: true, chars: 'Let me check the time.'.length });
    expect(first.output.thinking).toEqual({ redacted: true, chars: expect.any(Number) });
    expect(first.output.tool_uses[0].tool_name).toBe('current_time');
    const [[, tool]] = entriesOf(body, 'tool_call') as [[string, any]];
    expect(tool.input).toEqual({ redacted: true, chars: 2 });
    expect(tool.output).toEqual({ redacted: true, chars: expect.any(Number) });
    const [[, route]] = entriesOf(body, 'route') as [[string, any]];
    expect(route.chosen_model).toBe('scripted:demo');
    // feedback.explicit is aggregatable: its comment stays.
    expect(body.scores[0].comment).toBe('nice');
    expect(JSON.stringify(body.content)).not.toContain('Let me check the time');
  });
});
