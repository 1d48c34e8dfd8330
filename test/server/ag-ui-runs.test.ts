import { describe, expect, it } from 'vitest';
import { agUiAgent, ask, eventOf, idsAreUnique, runOnce, shape } from '../helpers/ag-ui.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 29 point 1, what an AG-UI client reads at a run's end and between runs: the usage, a cancel
 * every SDK accepts, the session's state, frontend tools and approvals as interrupts. Every event is
 * parsed with `@ag-ui/core`'s own EventSchema (runOnce) besides the client's verifier.
 */

async function storedTypes(t: TestServer, sessionId: string): Promise<string[]> {
  await t.context.flush();
  return t.context.db
    .prepare('SELECT type FROM events WHERE session_id = ? ORDER BY id')
    .pluck()
    .all(sessionId) as string[];
}

describe('AG-UI runs', () => {
  it('RUN_FINISHED carries the run usage per model, and its cost in result', async () => {
    const t = await startTestServer();
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-usage');
    ask(agent, 'think: time');
    const run = await runOnce(agent);
    expect(run.invalid).toEqual([]);
    const finished = eventOf(run, 'RUN_FINISHED')!;
    expect(finished.outcome).toBeUndefined();
    expect(finished.usage).toHaveLength(1);
    const [usage] = finished.usage;
    expect(usage).toMatchObject({ provider: 'scripted', model: 'scripted:demo' });
    expect(usage.inputTokens).toBeGreaterThan(0);
    expect(usage.outputTokens).toBeGreaterThan(0);
    expect(usage.totalTokens).toBe(usage.inputTokens + usage.outputTokens);
    expect(finished.result).toMatchObject({ model_calls: 2, stop_reason: 'end_turn' });
    expect(finished.result.cost_usd).toBeCloseTo(t.runtime.getSession('thread-usage').cost_so_far_usd, 8);
    expect(finished.result.cost_usd).toBeGreaterThan(0);
  });

  it('a REST cancel ends the run with RUN_ERROR cancelled, not an outcome SDKs before 1.0 refuse', async () => {
    const t = await startTestServer();
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-cancel');
    ask(agent, 'slow: a long story');
    let cancelled = false;
    const run = await runOnce(agent, {}, (event) => {
      if (cancelled || event.type !== 'TEXT_MESSAGE_CONTENT') return;
      cancelled = true;
      const turnId = t.runtime.currentTurn('thread-cancel')!.turnId;
      void t.request('POST', `/sessions/thread-cancel/turns/${turnId}/cancel`);
    });
    expect(run.invalid).toEqual([]);
    expect(run.types).not.toContain('RUN_FINISHED');
    expect(run.types.slice(-2)).toEqual(['MESSAGES_SNAPSHOT', 'RUN_ERROR']);
    expect(eventOf(run, 'RUN_ERROR')).toMatchObject({
      code: 'cancelled',
      message: expect.stringContaining('user_cancel'),
    });
    expect(shape(agent.messages)).toEqual(['user']);
  });

  it('STATE_SNAPSHOT opens each run; STATE_DELTA follows the model, the pending approvals and the cost', async () => {
    const t = await startTestServer({
      tool_confirmation: { execute: 'ask' },
      routing_rules: [{ name: 'deep', match: 'deeply', model: 'scripted:deep' }],
    });
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-state');
    ask(agent, 'hello');
    const first = await runOnce(agent);
    expect(first.types.slice(0, 2)).toEqual(['RUN_STARTED', 'STATE_SNAPSHOT']);
    expect(eventOf(first, 'STATE_SNAPSHOT')!.snapshot).toEqual({
      model: 'scripted:demo',
      pending_approvals: [],
      cost_usd: 0,
    });
    const costAfterFirst = t.runtime.getSession('thread-state').cost_so_far_usd;
    expect(agent.state).toEqual({ model: 'scripted:demo', pending_approvals: [], cost_usd: costAfterFirst });

    ask(agent, 'run: echo deeply');
    const asking = await runOnce(agent);
    expect(asking.invalid).toEqual([]);
    const paths = asking.events
      .filter((e) => e.type === 'STATE_DELTA')
      .flatMap((e) => e.delta.map((op: { path: string }) => op.path));
    expect(paths).toEqual(expect.arrayContaining(['/model', '/pending_approvals', '/cost_usd']));
    expect(agent.state.model).toBe('scripted:deep');
    expect(agent.state.pending_approvals).toMatchObject([
      { tool_name: 'shell', tool_call_id: agent.pendingInterrupts[0]!.toolCallId },
    ]);

    const resumed = await runOnce(agent, {
      resume: [
        { interruptId: agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true } },
      ],
    });
    expect(resumed.invalid).toEqual([]);
    expect(agent.state).toEqual({
      model: 'scripted:deep',
      pending_approvals: [],
      cost_usd: t.runtime.getSession('thread-state').cost_so_far_usd,
    });
  });

  it('a frontend tool is offered to the model; its call ends the run, and the run with its result goes on with the turn', async () => {
    const t = await startTestServer();
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-frontend');
    const tools = [
      {
        name: 'pick_color',
        description: 'Asks the user for a color',
        parameters: { type: 'object', properties: { hint: { type: 'string' } } },
      },
    ];
    ask(agent, 'client: pick_color {"hint":"warm"}');
    const calling = await runOnce(agent, { tools });
    expect(calling.error).toBeNull();
    expect(calling.invalid).toEqual([]);
    expect(calling.types).toEqual(
      expect.arrayContaining(['TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END']),
    );
    expect(calling.types).not.toContain('TOOL_CALL_RESULT');
    expect(calling.types.at(-1)).toBe('RUN_FINISHED');
    const start = eventOf(calling, 'TOOL_CALL_START')!;
    expect(start.toolCallName).toBe('pick_color');
    expect(shape(agent.messages)).toEqual(['user', 'assistant(tools)']);
    const call = agent.messages[1]!.role === 'assistant' ? agent.messages[1]!.toolCalls![0]! : null;
    expect(JSON.parse(call!.function.arguments)).toEqual({ hint: 'warm' });
    // The turn waits for the client: a new question meanwhile is refused, naming what it waits for.
    const refused = await t.request('POST', '/ag-ui', {
      threadId: 'thread-frontend',
      runId: 'r-meanwhile',
      messages: [{ id: 'u-x', role: 'user', content: 'hello?' }],
    });
    expect(refused).toMatchObject({
      status: 409,
      body: { error: { message: expect.stringContaining(start.toolCallId) } },
    });

    agent.addMessage({ id: 'client-result-1', role: 'tool', toolCallId: start.toolCallId, content: 'teal' });
    const answered = await runOnce(agent, { tools });
    expect(answered.error).toBeNull();
    expect(answered.invalid).toEqual([]);
    expect(answered.types).not.toContain('TOOL_CALL_RESULT');
    expect(shape(agent.messages)).toEqual(['user', 'assistant(tools)', 'tool', 'assistant']);
    expect(agent.messages[2]!.id).toBe('client-result-1');
    expect(agent.messages[3]!.content).toBe('The tool returned teal');
    expect(idsAreUnique(agent.messages)).toBe(true);
    // One turn, its call reported with the catalog's own events.
    expect(t.runtime.getSession('thread-frontend').turn_count).toBe(1);
    const types = await storedTypes(t, 'thread-frontend');
    expect(types.filter((type) => type.startsWith('tool.'))).toEqual(['tool.called', 'tool.completed']);

    // A frontend tool may not take the name of one of metis's own.
    const clash = await t.request('POST', '/ag-ui', {
      threadId: 'thread-frontend',
      runId: 'r-clash',
      messages: [{ id: 'u-y', role: 'user', content: 'hi' }],
      tools: [{ name: 'shell', description: 'mine' }],
    });
    expect(clash).toMatchObject({
      status: 400,
      body: { error: { message: expect.stringContaining('shell') } },
    });
  });

  it('an approval is an interrupt: resume denies or allows it, and the confirmation route still answers it', async () => {
    const t = await startTestServer({ tool_confirmation: { execute: 'ask' } });
    const agent = agUiAgent(`${t.url}/ag-ui`, 'thread-interrupt');
    ask(agent, 'run: echo never-run');
    const asking = await runOnce(agent);
    expect(asking.invalid).toEqual([]);
    const finished = eventOf(asking, 'RUN_FINISHED')!;
    expect(finished.outcome.type).toBe('interrupt');
    const [interrupt] = finished.outcome.interrupts;
    expect(interrupt).toMatchObject({
      reason: 'tool_call',
      toolCallId: expect.any(String),
      expiresAt: expect.any(String),
    });
    expect(interrupt.responseSchema.required).toEqual(['approved']);
    // Without its answer, the thread takes no new question.
    const refused = await t.request('POST', '/ag-ui', {
      threadId: 'thread-interrupt',
      runId: 'r-x',
      messages: [{ id: 'u-x', role: 'user', content: 'hello?' }],
    });
    expect(refused).toMatchObject({
      status: 409,
      body: { error: { message: expect.stringContaining(interrupt.id) } },
    });

    const denied = await runOnce(agent, { resume: [{ interruptId: interrupt.id, status: 'cancelled' }] });
    expect(denied.error).toBeNull();
    expect(denied.invalid).toEqual([]);
    expect(String(agent.messages.at(-2)!.content)).toContain('denied');
    expect(shape(agent.messages)).toEqual(['user', 'assistant(tools)', 'tool', 'assistant']);

    // Answered on metis's own route instead: the resume that follows finds it decided and reports the thread.
    ask(agent, 'run: echo via-route');
    await runOnce(agent);
    const pending = agent.pendingInterrupts[0]!;
    expect(
      (
        await t.request('POST', `/sessions/thread-interrupt/confirmations/${pending.id}`, {
          decision: 'allow',
        })
      ).status,
    ).toBeLessThan(300);
    await t.runtime.currentTurn('thread-interrupt')?.done;
    const after = await runOnce(agent, {
      resume: [{ interruptId: pending.id, status: 'resolved', payload: { approved: true } }],
    });
    expect(after.error).toBeNull();
    expect(after.invalid).toEqual([]);
    expect(shape(agent.messages)).toEqual([
      'user',
      'assistant(tools)',
      'tool',
      'assistant',
      'user',
      'assistant(tools)',
      'tool',
      'assistant',
    ]);
    expect(String(agent.messages.at(-2)!.content)).toContain('via-route');
    expect(agent.pendingInterrupts).toEqual([]);
  });
});
