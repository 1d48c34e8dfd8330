import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { MetisError } from '../../src/core/errors.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
import { byType, shape, startRuntime } from '../helpers/runtime.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

describe('agent loop sequences', () => {
  it('a tool-using turn follows bus §8.1 and streaming §5.3, with the spec parents', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'time');
    await h.settle(done);
    const events = h.framesOf(session.id);
    expect(shape(events)).toEqual([
      'session.created',
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'tool.use_start',
      'tool.use_input_delta*',
      'tool.use_end',
      'message.complete',
      'llm.call_completed',
      'tool.called',
      'tool.completed',
      'llm.call_started',
      'message.start',
      'text.delta*',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    const one = (type: string, n = 0) => byType(events, type)[n]!;
    const turn = one('turn.started');
    expect(turn.parent_event_id).toBeNull();
    expect(one('route.decided').parent_event_id).toBe(turn.id);
    expect(one('llm.call_started').parent_event_id).toBe(turn.id);
    expect(one('llm.call_completed').parent_event_id).toBe(one('llm.call_started').id);
    expect(one('tool.called').parent_event_id).toBe(one('llm.call_completed').id);
    expect(one('tool.completed').parent_event_id).toBe(one('tool.called').id);
    expect(one('llm.call_started', 1).parent_event_id).toBe(one('tool.completed').id);
    expect(one('llm.call_completed', 1).parent_event_id).toBe(one('llm.call_started', 1).id);
    expect(one('turn.completed').parent_event_id).toBe(turn.id);
    expect(one('llm.call_completed').payload).toMatchObject({
      stop_reason: 'tool_use',
      produced_tool_calls: 1,
    });
    expect(one('llm.call_completed', 1).payload).toMatchObject({ stop_reason: 'end_turn' });
    expect(one('tool.called').payload).toMatchObject({ tool_name: 'current_time', side_effects: 'none' });
    // Every event of the turn carries its turn id; costs are computed from usage.
    expect(events.filter((e) => e.type !== 'session.created').every((e) => e.turn_id === turn.turn_id)).toBe(
      true,
    );
    const completed = one('turn.completed').payload;
    expect(completed).toMatchObject({ llm_call_count: 2, tool_call_count: 1 });
    expect(Number(completed.total_cost_usd)).toBeGreaterThan(0);
    expect(h.runtime.getSession(session.id).cost_so_far_usd).toBeCloseTo(Number(completed.total_cost_usd), 8);
  });

  it('the route decision carries all seven policies and tells why the winner won', async () => {
    const h = startRuntime({
      routing_rules: [{ name: 'commits', match: 'commit', model: 'scripted:rules' }],
    });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const first = h.runtime.submitTurn(session.id, 'write the commit message');
    await h.settle(first.done);
    const second = h.runtime.submitTurn(session.id, 'hello', { model: 'nope:model' });
    await h.settle(second.done);
    const [ruleWins, overrideRejected] = byType(h.framesOf(session.id), 'route.decided').map(
      (e) => e.payload,
    );
    const chain = (p: Record<string, unknown>) =>
      p.chain as { policy: string; verdict: string; validation_failure: string | null }[];
    expect(chain(ruleWins!).map((c) => c.policy)).toEqual([
      'per_message_override',
      'manual_sticky',
      'rule',
      'pattern',
      'delegate_request',
      'workspace_default',
      'global_default',
    ]);
    expect(ruleWins).toMatchObject({ chosen_model: 'scripted:rules', winner_index: 2 });
    expect(chain(ruleWins!).map((c) => c.verdict)).toEqual([
      'not_applicable',
      'not_applicable',
      'chose',
      'not_applicable',
      'not_applicable',
      'not_applicable',
      'deferred',
    ]);
    expect(chain(overrideRejected!)[0]).toMatchObject({
      verdict: 'rejected',
      validation_failure: 'not_configured',
    });
    expect(overrideRejected).toMatchObject({ chosen_model: 'scripted:demo', winner_index: 6 });
  });

  it('a failing tool follows bus §8.2: tool.failed, then the loop calls the model again', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'read: does-not-exist.txt');
    await h.settle(done);
    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    expect(events.map((e) => e.type)).toEqual([
      'session.created',
      'turn.started',
      'route.decided',
      'llm.call_started',
      'llm.call_completed',
      'tool.called',
      'tool.failed',
      'llm.call_started',
      'llm.call_completed',
      'turn.completed',
    ]);
    const failed = byType(events, 'tool.failed')[0]!;
    expect(failed.payload).toMatchObject({ error_class: 'not_found' });
    // Every parent of the §8.2 chain (catalog §6 "Parent" of each type, §4.3 for the retry call).
    const one = (type: string, n = 0) => byType(events, type)[n]!;
    const turn = one('turn.started');
    expect(one('session.created').parent_event_id).toBeNull();
    expect(turn.parent_event_id).toBeNull();
    expect(one('route.decided').parent_event_id).toBe(turn.id);
    expect(one('llm.call_started').parent_event_id).toBe(turn.id);
    expect(one('llm.call_completed').parent_event_id).toBe(one('llm.call_started').id);
    expect(one('tool.called').parent_event_id).toBe(one('llm.call_completed').id);
    expect(failed.parent_event_id).toBe(one('tool.called').id);
    expect(one('llm.call_started', 1).parent_event_id).toBe(failed.id);
    expect(one('llm.call_completed', 1).parent_event_id).toBe(one('llm.call_started', 1).id);
    expect(one('llm.call_completed', 1).payload).toMatchObject({ stop_reason: 'end_turn' });
    expect(one('turn.completed').parent_event_id).toBe(turn.id);
    const call = h.runtime.sessions.toolCall(String(failed.payload.tool_use_id));
    expect(call).toMatchObject({ status: 'failed', error_class: 'not_found', tool_name: 'read_file' });
  });

  it('thinking streams before text with a signature on the last thinking delta only', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'think: why is the sky blue');
    await h.settle(done);
    const events = h.framesOf(session.id);
    const thinking = byType(events, 'thinking.delta');
    expect(thinking.length).toBeGreaterThan(1);
    expect(thinking.slice(0, -1).every((e) => e.payload.signature === null)).toBe(true);
    expect(thinking.at(-1)!.payload.signature).toMatch(/^sig_/);
    const complete = byType(events, 'message.complete')[0]!.payload;
    const blocks = complete.final_content as { type: string; thinking?: string; text?: string }[];
    expect(blocks.map((b) => b.type)).toEqual(['thinking', 'text']);
    expect(blocks[0]!.thinking).toBe(thinking.map((e) => e.payload.text).join(''));
    expect(blocks[1]!.text).toBe(
      byType(events, 'text.delta')
        .map((e) => e.payload.text)
        .join(''),
    );
    expect(byType(events, 'llm.call_completed')[0]!.payload.produced_thinking_blocks).toBe(1);
  });

  it('a command that exits non-zero completes with success: false and an is_error tool result', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(session.id, 'run: echo boom; exit 3').done);
    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    expect(byType(events, 'tool.failed')).toEqual([]);
    expect(byType(events, 'tool.completed')[0]!.payload).toMatchObject({ success: false });
    const toolMessage = h.runtime.sessions.messages(session.id).find((m) => m.role === 'tool')!;
    expect(toolMessage.content[0]).toMatchObject({ type: 'tool_result', is_error: true });
    expect(JSON.stringify(toolMessage.content[0])).toContain('exit code 3');
  });

  it('an adapter error of class cancelled with no cancel fails the turn: turn.completed, not turn.cancelled', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const outcome = await h.runtime.submitTurn(session.id, 'fail: cancelled').done;
    await h.context.flush();
    expect(outcome.status).toBe('failed');
    const events = h.framesOf(session.id);
    expect(byType(events, 'turn.cancelled')).toEqual([]);
    expect(byType(events, 'llm.call_failed')[0]!.payload.error_class).toBe('cancelled');
    // Cut short with the spec's `cancelled`, and the class the adapter reported (docs/decisions.md).
    expect(byType(events, 'message.complete')[0]!.payload).toMatchObject({
      stop_reason: 'cancelled',
      error_class: 'cancelled',
    });
    expect(events.filter((e) => e.seq !== null).at(-1)!.type).toBe('turn.completed');
  });

  it('a model failure is llm.call_failed then turn.completed (streaming §9.1)', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'fail: rate_limit');
    const outcome = await done;
    await h.context.flush();
    expect(outcome.status).toBe('failed');
    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    expect(events.map((e) => e.type).slice(-3)).toEqual([
      'llm.call_started',
      'llm.call_failed',
      'turn.completed',
    ]);
    expect(byType(events, 'llm.call_failed')[0]!.payload).toMatchObject({
      error_class: 'rate_limit',
      retry_count: 0,
    });
  });

  it('delegation follows bus §8.3: a worker session between delegate.started and delegate.completed', async () => {
    const h = startRuntime();
    const planner = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(planner.id, 'delegate: summarize the readme');
    await h.settle(done);
    const plannerEvents = h.framesOf(planner.id).filter((e) => e.seq !== null);
    const started = byType(plannerEvents, 'delegate.started')[0]!;
    const workerId = String(started.payload.worker_session_id);
    const workerEvents = h.framesOf(workerId).filter((e) => e.seq !== null);
    expect(workerEvents.map((e) => e.type)).toEqual([
      'session.created',
      'turn.started',
      'route.decided',
      'llm.call_started',
      'llm.call_completed',
      'turn.completed',
      'session.ended',
    ]);
    const merged = [...plannerEvents, ...workerEvents].sort((a, b) => (a.id < b.id ? -1 : 1));
    const order = merged.map((e) => `${e.session_id === workerId ? 'W' : 'P'}:${e.type}`);
    const from = order.indexOf('P:tool.called');
    expect(order.slice(from, from + 3)).toEqual(['P:tool.called', 'P:delegate.started', 'W:session.created']);
    expect(order.slice(-7)).toEqual([
      'W:turn.completed',
      'W:session.ended',
      'P:delegate.completed',
      'P:tool.completed',
      'P:llm.call_started',
      'P:llm.call_completed',
      'P:turn.completed',
    ]);
    const route = byType(workerEvents, 'route.decided')[0]!.payload;
    expect(route).toMatchObject({ chosen_model: 'scripted:fast', winner_index: 4 });
    expect(byType(workerEvents, 'llm.call_started')[0]!.payload.is_worker).toBe(true);
    expect(byType(workerEvents, 'llm.call_started')[0]!.actor).toBe('worker');
    expect(h.runtime.getSession(workerId).parent_session_id).toBe(planner.id);
    const completed = byType(plannerEvents, 'delegate.completed')[0]!;
    expect(completed.parent_event_id).toBe(started.id);
    expect(completed.payload).toMatchObject({
      success: true,
      worker_session_id: workerId,
      model: 'scripted:fast',
    });
    expect(Number(completed.payload.worker_total_cost_usd)).toBeGreaterThan(0);

    // Planner parents before the worker runs. delegate.started descends from the planner call that
    // emitted the delegate() tool_use (catalog §6.8), not from tool.called: §8.3's arrows are order.
    const p = (type: string, n = 0) => byType(plannerEvents, type)[n]!;
    const plannerTurn = p('turn.started');
    expect(plannerTurn.parent_event_id).toBeNull();
    expect(p('route.decided').parent_event_id).toBe(plannerTurn.id);
    expect(p('llm.call_started').parent_event_id).toBe(plannerTurn.id);
    expect(p('llm.call_started').payload.is_worker).toBe(false);
    expect(p('llm.call_completed').parent_event_id).toBe(p('llm.call_started').id);
    expect(p('llm.call_completed').payload).toMatchObject({ produced_tool_calls: 1 });
    expect(p('tool.called').parent_event_id).toBe(p('llm.call_completed').id);
    expect(p('tool.called').payload.tool_name).toBe('delegate');
    expect(started.parent_event_id).toBe(p('llm.call_completed').id);
    expect(started.payload).toMatchObject({ tier: 'fast', resolved_model: 'scripted:fast' });

    // The worker session: its own roots (no event-level pointer to the planner, bus §10.2), then
    // the §8.1 parents inside its turn.
    const w = (type: string, n = 0) => byType(workerEvents, type)[n]!;
    const workerTurn = w('turn.started');
    expect(w('session.created').parent_event_id).toBeNull();
    expect(workerTurn.parent_event_id).toBeNull();
    expect(w('route.decided').parent_event_id).toBe(workerTurn.id);
    expect(w('llm.call_started').parent_event_id).toBe(workerTurn.id);
    expect(w('llm.call_completed').parent_event_id).toBe(w('llm.call_started').id);
    expect(w('turn.completed').parent_event_id).toBe(workerTurn.id);
    expect(w('session.ended').parent_event_id).toBeNull();
    expect(w('session.ended').payload).toMatchObject({ disposition: 'completed', turn_count: 1 });
    expect(
      workerEvents
        .filter((e) => e.type !== 'session.created' && e.type !== 'session.ended')
        .every((e) => e.turn_id === workerTurn.turn_id),
    ).toBe(true);

    // Back in the planner: the worker's result closes the delegate call and feeds the next call.
    expect(p('tool.completed').parent_event_id).toBe(p('tool.called').id);
    expect(p('tool.completed').payload.tool_use_id).toBe(p('tool.called').payload.tool_use_id);
    expect(p('llm.call_started', 1).parent_event_id).toBe(p('tool.completed').id);
    expect(p('llm.call_completed', 1).parent_event_id).toBe(p('llm.call_started', 1).id);
    expect(p('llm.call_completed', 1).payload).toMatchObject({ stop_reason: 'end_turn' });
    expect(p('turn.completed').parent_event_id).toBe(plannerTurn.id);
  });

  it('refuses a second turn while one is in flight and names the turn', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const first = h.runtime.submitTurn(session.id, 'slow: a long story');
    let error: unknown;
    try {
      h.runtime.submitTurn(session.id, 'hello');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(MetisError);
    expect((error as MetisError).code).toBe('METIS_ERR_TURN_IN_FLIGHT');
    expect((error as MetisError).message).toContain(first.turnId);
    h.runtime.cancelTurn(session.id, first.turnId);
    await h.settle(first.done);
  });

  it('writes messages and tool calls to the session store with their status', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, `run: echo hi > ${join(h.workspace, 'out.txt')}`);
    await h.settle(done);
    expect(existsSync(join(h.workspace, 'out.txt'))).toBe(true);
    const messages = h.runtime.sessions.messages(session.id);
    expect(messages.map((m) => [m.role, m.status])).toEqual([
      ['user', 'complete'],
      ['assistant', 'complete'],
      ['tool', 'complete'],
      ['assistant', 'complete'],
    ]);
    const toolUse = (messages[1]!.content as { type: string; id?: string }[]).find(
      (b) => b.type === 'tool_use',
    )!;
    expect(h.runtime.sessions.toolCall(toolUse.id!)).toMatchObject({
      status: 'completed',
      tool_name: 'shell',
    });
    expect(messages[1]!.usage).toMatchObject({ pricing_version: expect.any(String) });
  });
});

describe('runtime edges', () => {
  it('input that fails the tool schema is tool.input_invalid and an error tool_result, then the loop goes on', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'read: ');
    await h.settle(done);
    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    const invalid = byType(events, 'tool.input_invalid');
    expect(invalid).toHaveLength(1);
    expect(invalid[0]!.payload.tool_name).toBe('read_file');
    expect((invalid[0]!.payload.validation_errors as string[])[0]).toMatch(/^path/);
    expect(invalid[0]!.parent_event_id).toBe(byType(events, 'llm.call_completed')[0]!.id);
    expect(byType(events, 'tool.called')).toHaveLength(0);
    expect(byType(events, 'llm.call_started')[1]!.parent_event_id).toBe(invalid[0]!.id);
    const toolMessage = h.runtime.sessions.messages(session.id).find((m) => m.role === 'tool')!;
    expect(toolMessage.content[0]).toMatchObject({ type: 'tool_result', is_error: true });
  });

  it('a confirmation can be denied, times out, or allows the tool for the session', async () => {
    const h = startRuntime({
      tool_confirmation: { write: 'ask', execute: 'ask', network: 'ask' },
      confirmation_timeout_ms: 200,
    });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const answers: ('deny' | 'allow' | null)[] = ['deny', null, 'allow'];
    h.context.bus.subscribe({
      name: 'answers',
      fastPath: true,
      filter: { event_types: ['tool.confirmation_requested'] },
      handler: (event) => {
        const answer = answers.shift();
        // A session-scoped deny would be remembered (docs/decisions.md): deny once, allow for the session.
        if (answer)
          h.runtime.confirm(
            session.id,
            String(event.payload.confirmation_request_id),
            answer,
            answer === 'deny' ? 'once' : 'session',
          );
      },
    });
    for (let i = 0; i < 4; i += 1) await h.settle(h.runtime.submitTurn(session.id, 'run: echo hi').done);
    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    expect(byType(events, 'tool.confirmation_resolved').map((e) => e.payload.decision)).toEqual([
      'deny',
      'timeout',
      'allow',
    ]);
    expect(byType(events, 'tool.failed').map((e) => e.payload.error_class)).toEqual([
      'user_denied',
      'confirmation_timeout',
    ]);
    // The fourth call runs without asking: the third answer allowed shell for the session.
    expect(byType(events, 'tool.confirmation_requested')).toHaveLength(3);
    expect(byType(events, 'tool.completed')).toHaveLength(2);
  });

  it('an idle session ends as abandoned after the inactivity timeout', async () => {
    const h = startRuntime({ inactivity_timeout_ms: 30 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(session.id, 'hello').done);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await h.context.flush();
    const ended = byType(h.framesOf(session.id), 'session.ended');
    expect(ended.map((e) => e.payload.disposition)).toEqual(['abandoned']);
    expect(ended[0]!.payload.turn_count).toBe(1);
    expect(h.runtime.getSession(session.id).status).toBe('ended');
  });
});

/** A runtime on the trace database at `dbPath`, like a server process started on it; `stop` is a shutdown. */
function openProcess(dbPath: string, config: RuntimeConfigInput = {}) {
  const context: TraceContext = tempTraceContext({ dbPath });
  const committed: MetisEvent[] = [];
  context.writer.onCommit((batch) => committed.push(...batch));
  const runtime: Runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: { ...config, scripted: { token_delay_ms: 0 } },
  });
  onTestFinished(() => runtime.close());
  return {
    runtime,
    context,
    committed,
    stop: async () => {
      await runtime.close();
      await context.close();
    },
  };
}

type Chain = { policy: string; verdict: string; candidate_model: string | null }[];

describe('resuming a session after a restart', () => {
  it('keeps the sticky model, the turn count and the age: routing picks manual_sticky, session.ended spans both processes', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    const before = openProcess(dbPath);
    const createdMs = Date.now();
    const session = before.runtime.createSession({ workspacePath: workspace });
    before.runtime.setStickyModel(session.id, 'scripted:sticky');
    await before.runtime.submitTurn(session.id, 'hello').done;
    await before.stop();
    // The restart takes a while: the ended session's duration must include it, not start at the resume.
    await new Promise((resolve) => setTimeout(resolve, 300));

    const after = openProcess(dbPath);
    expect(after.runtime.getSession(session.id)).toMatchObject({
      turn_count: 1,
      active_model: 'scripted:sticky',
    });
    const { done } = after.runtime.submitTurn(session.id, 'hello again');
    expect((await done).status).toBe('completed');
    after.runtime.endSession(session.id);
    await after.context.flush();

    const mine = after.committed.filter((e) => e.session_id === session.id);
    expect(mine.map((e) => e.type)[0]).toBe('session.resumed');
    const route = byType(mine, 'route.decided')[0]!.payload;
    expect(route).toMatchObject({ chosen_model: 'scripted:sticky', winner_index: 1 });
    expect((route.chain as Chain)[1]).toMatchObject({ policy: 'manual_sticky', verdict: 'chose' });
    expect(byType(mine, 'llm.call_started')[0]!.payload.model).toBe('scripted:sticky');
    const ended = byType(mine, 'session.ended')[0]!.payload;
    expect(ended).toMatchObject({ disposition: 'completed', turn_count: 2 });
    // Bounded by the wall time around the whole life of the session (1 ms slack for the clock origin).
    expect(ended.duration_seconds as number).toBeGreaterThanOrEqual(0.3);
    expect(ended.duration_seconds as number).toBeLessThanOrEqual((Date.now() - createdMs + 1) / 1000);
  });

  it('restores a model set at creation or just before the restart, and leaves a session without one unsticky', async () => {
    const dbPath = join(tempDir(), 'metis.db');
    const workspace = tempDir('metis-ws-');
    // A rule the sticky model outranks (manual_sticky comes before rule in the chain) and the default does not.
    const config = { routing_rules: [{ name: 'greetings', match: 'hello', model: 'scripted:rules' }] };
    const before = openProcess(dbPath, config);
    const atCreation = before.runtime.createSession({ workspacePath: workspace, model: 'scripted:created' });
    const setLate = before.runtime.createSession({ workspacePath: workspace });
    await before.runtime.submitTurn(setLate.id, 'plain').done;
    before.runtime.setStickyModel(setLate.id, 'scripted:late');
    const unsticky = before.runtime.createSession({ workspacePath: workspace });
    await before.runtime.submitTurn(unsticky.id, 'plain').done;
    await before.runtime.submitTurn(unsticky.id, 'plain').done;
    await before.stop();

    const after = openProcess(dbPath, config);
    for (const id of [atCreation.id, setLate.id, unsticky.id]) {
      await after.runtime.submitTurn(id, 'hello').done;
      after.runtime.endSession(id);
    }
    await after.context.flush();
    const routeOf = (id: string) =>
      byType(
        after.committed.filter((e) => e.session_id === id),
        'route.decided',
      )[0]!.payload;
    const endedOf = (id: string) =>
      byType(
        after.committed.filter((e) => e.session_id === id),
        'session.ended',
      )[0]!.payload;
    expect(routeOf(atCreation.id)).toMatchObject({ chosen_model: 'scripted:created', winner_index: 1 });
    expect(routeOf(setLate.id)).toMatchObject({ chosen_model: 'scripted:late', winner_index: 1 });
    expect(routeOf(unsticky.id)).toMatchObject({ chosen_model: 'scripted:rules', winner_index: 2 });
    expect((routeOf(unsticky.id).chain as Chain)[1]).toMatchObject({
      policy: 'manual_sticky',
      verdict: 'not_applicable',
      candidate_model: null,
    });
    expect(endedOf(atCreation.id).turn_count).toBe(1);
    expect(endedOf(setLate.id).turn_count).toBe(2);
    expect(endedOf(unsticky.id).turn_count).toBe(3);
  });
});

describe('a turn no model can serve', () => {
  it('ends with turn.completed (no route.decided, no model call), and the next turn runs', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    h.runtime.models.setAvailable('scripted', false);
    const first = h.runtime.submitTurn(session.id, 'hello');
    const outcome = await first.done;
    await h.context.flush();
    expect(outcome).toMatchObject({ status: 'failed', llmCalls: 0, toolCalls: 0 });
    expect(h.runtime.getSession(session.id)).toMatchObject({ current_turn_id: null, turn_count: 1 });

    h.runtime.models.setAvailable('scripted', true);
    const second = h.runtime.submitTurn(session.id, 'hello again');
    expect((await second.done).status).toBe('completed');
    await h.context.flush();

    const events = h.framesOf(session.id).filter((e) => e.seq !== null);
    const firstTurn = events.filter((e) => e.turn_id === first.turnId);
    expect(firstTurn.map((e) => e.type)).toEqual(['turn.started', 'turn.completed']);
    expect(firstTurn[1]!.parent_event_id).toBe(firstTurn[0]!.id);
    expect(firstTurn[1]!.payload).toMatchObject({
      stop_reason: 'end_turn',
      llm_call_count: 0,
      tool_call_count: 0,
      total_cost_usd: 0,
    });
    // Why, for every client and not only in the server's log: each candidate routing rejected.
    const extra = firstTurn[1]!.payload.signals_extra as { failure: string; routing: string[] };
    expect(extra.failure).toBe('no_model_available');
    expect(extra.routing.length).toBeGreaterThan(0);
    expect(extra.routing.join('\n')).toContain('scripted');
    expect(h.framesOf(session.id).filter((e) => e.turn_id === first.turnId && e.seq === null)).toEqual([]);
    const secondTurn = events.filter((e) => e.turn_id === second.turnId).map((e) => e.type);
    expect(secondTurn).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'llm.call_completed',
      'turn.completed',
    ]);
  });
});
