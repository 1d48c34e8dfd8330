import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import {
  type AdapterChunk,
  AdapterError,
  type AdapterResult,
  type ModelAdapter,
  type ModelRequest,
} from '../../src/core/runtime/model-adapter.js';
import { byType, type RuntimeHarness, startRuntime } from '../helpers/runtime.js';

/** What a worker may do, how it is routed, what it costs and how it ends (bus §6.1, §6.8, §8.3). */

const persisted = (h: RuntimeHarness, sessionId: string): MetisEvent[] =>
  h.framesOf(sessionId).filter((e) => e.seq !== null);

const USAGE = { input_tokens: 10, output_tokens: 5, cached_input_tokens: 0, cache_creation_input_tokens: 0 };

/** A planner model whose first call asks delegate() with `input`, and which answers after the result. */
function plannerModel(input: Record<string, unknown>): ModelAdapter {
  return {
    provider: 'planner',
    async *stream(request: ModelRequest): AsyncGenerator<AdapterChunk, AdapterResult, void> {
      if (request.messages.at(-1)!.role === 'tool') {
        yield { kind: 'text', index: 0, text: 'done' };
        return { stop_reason: 'end_turn', usage: USAGE, provider_request_id: 'r2' };
      }
      yield { kind: 'tool_use_start', index: 0, tool_use_id: 'tu_planner_1', tool_name: 'delegate' };
      yield { kind: 'tool_use_end', index: 0, tool_use_id: 'tu_planner_1', final_input: input };
      return { stop_reason: 'tool_use', usage: USAGE, provider_request_id: 'r1' };
    },
  };
}

/** Runs one planner turn that delegates `input`; returns the planner's and the worker's events. */
async function delegateWith(input: Record<string, unknown>) {
  const h = startRuntime({ default_model: 'planner:any' });
  h.runtime.models.register('planner', () => plannerModel(input));
  const planner = h.runtime.createSession({ workspacePath: h.workspace });
  await h.settle(h.runtime.submitTurn(planner.id, 'go').done);
  const plannerEvents = persisted(h, planner.id);
  const started = byType(plannerEvents, 'delegate.started')[0]!;
  const workerEvents = persisted(h, String(started.payload.worker_session_id));
  return { started, workerEvents };
}

const toolsCalled = (workerEvents: readonly MetisEvent[]) =>
  byType(workerEvents, 'tool.called').map((e) => e.payload.tool_name);

describe('a worker keeps the tools its planner allowed (bus §6.8 allowed_tool_count, dropped_tools)', () => {
  it('allowed_tools limits what the worker may call; a call to another tool is refused as unknown', async () => {
    const { started, workerEvents } = await delegateWith({
      task: 'run: echo from-the-worker',
      tier: 'fast',
      allowed_tools: ['read_file'],
    });
    expect(started.payload).toMatchObject({ allowed_tool_count: 1, dropped_tools: [] });
    expect(toolsCalled(workerEvents)).toEqual([]);
    const invalid = byType(workerEvents, 'tool.input_invalid');
    expect(invalid.map((e) => e.payload.tool_name)).toEqual(['shell']);
    expect(byType(workerEvents, 'tool.completed')).toEqual([]);
  });

  it('names a worker may not have (delegate) or that do not exist are dropped, not counted', async () => {
    const { started } = await delegateWith({
      task: 'hello',
      tier: 'fast',
      allowed_tools: ['delegate', 'no_such_tool', 'read_file', 'read_file'],
    });
    expect(started.payload).toMatchObject({
      allowed_tool_count: 1,
      dropped_tools: ['delegate', 'no_such_tool'],
    });
  });

  it('without allowed_tools the worker keeps every tool but delegate, and counts them', async () => {
    const { started, workerEvents } = await delegateWith({ task: 'run: echo ok', tier: 'fast' });
    // The built-ins: current_time, read_file, shell, and delegate, which a worker never has.
    expect(started.payload).toMatchObject({ allowed_tool_count: 3, dropped_tools: [] });
    expect(toolsCalled(workerEvents)).toEqual(['shell']);
    expect(byType(workerEvents, 'tool.completed')).toHaveLength(1);
  });
});

describe('a worker is routed by its tier (bus §6.8: delegate_request chooses inside worker re-entry)', () => {
  it('a routing rule that matches the task does not apply in the worker; the events name the model used', async () => {
    const h = startRuntime({
      routing_rules: [{ name: 'summaries', match: 'summarize', model: 'scripted:rules' }],
    });
    const planner = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(planner.id, 'delegate: summarize the readme').done);
    const plannerEvents = persisted(h, planner.id);
    const started = byType(plannerEvents, 'delegate.started')[0]!;
    const worker = persisted(h, String(started.payload.worker_session_id));
    const route = byType(worker, 'route.decided')[0]!.payload;
    const chain = route.chain as { policy: string; verdict: string }[];
    expect(chain.find((c) => c.policy === 'rule')).toMatchObject({ verdict: 'not_applicable' });
    expect(chain.find((c) => c.policy === 'delegate_request')).toMatchObject({ verdict: 'chose' });
    const used = byType(worker, 'llm.call_started')[0]!.payload.model;
    expect(route.chosen_model).toBe(used);
    expect(started.payload.resolved_model).toBe(used);
    expect(byType(plannerEvents, 'delegate.completed')[0]!.payload.model).toBe(used);
    // The planner itself is still routed by the rule.
    expect(byType(plannerEvents, 'route.decided')[0]!.payload.chosen_model).toBe('scripted:rules');
  });
});

describe('a cancelled planner cancels its worker for the same reason', () => {
  it('a planner turn timeout ends the worker turn with reason timeout and the worker session abandoned', async () => {
    const h = startRuntime({ turn_timeout_ms: 150 });
    const planner = h.runtime.createSession({ workspacePath: h.workspace });
    const outcome = await h.runtime.submitTurn(planner.id, 'delegate: slow: a long survey').done;
    await h.context.flush();
    expect(outcome.status).toBe('cancelled');
    const plannerEvents = persisted(h, planner.id);
    const workerId = String(byType(plannerEvents, 'delegate.started')[0]!.payload.worker_session_id);
    const worker = persisted(h, workerId);
    expect(byType(plannerEvents, 'turn.cancelled')[0]!.payload.reason).toBe('timeout');
    expect(byType(worker, 'turn.cancelled')[0]!.payload.reason).toBe('timeout');
    expect(byType(worker, 'session.ended')[0]!.payload.disposition).toBe('abandoned');
    expect(byType(plannerEvents, 'delegate.failed')[0]!.payload.failure_mode).toBe('cancelled_by_user');
  });
});

describe('costs are complete when they are reported', () => {
  const sumOf = (events: readonly MetisEvent[]) =>
    byType(events, 'llm.call_completed').reduce((sum, e) => sum + (e.payload.cost_usd as number), 0);

  it("a worker's session.ended counts every call, though it is ended right after its turn", async () => {
    const h = startRuntime();
    const planner = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(planner.id, 'delegate: time').done);
    const plannerEvents = persisted(h, planner.id);
    const worker = persisted(
      h,
      String(byType(plannerEvents, 'delegate.started')[0]!.payload.worker_session_id),
    );
    expect(byType(worker, 'llm.call_completed')).toHaveLength(2);
    const ended = byType(worker, 'session.ended')[0]!.payload;
    expect(ended.total_cost_usd).toBeGreaterThan(0);
    expect(ended.total_cost_usd).toBeCloseTo(sumOf(worker), 10);
    expect(Number(byType(plannerEvents, 'delegate.completed')[0]!.payload.worker_total_cost_usd)).toBeCloseTo(
      sumOf(worker),
      8,
    );
  });

  it('a session ended right after its turn reports the cost of that turn', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    await h.runtime.submitTurn(session.id, 'hello').done;
    h.runtime.endSession(session.id);
    await h.context.flush();
    const events = persisted(h, session.id);
    expect(sumOf(events)).toBeGreaterThan(0);
    expect(byType(events, 'session.ended')[0]!.payload.total_cost_usd).toBeCloseTo(sumOf(events), 10);
  });

  it("a failed delegation's worker spend is part of the planner's cost", async () => {
    // The worker fails on its second call, after the first (a tool call) was paid for.
    const h = startRuntime({
      worker_tiers: { fast: 'failing:model' },
      pricing: { 'failing:*': { input_per_mtok: 3, output_per_mtok: 15 } },
    });
    h.runtime.models.register('failing', () => failsAfterFirstCall());
    const planner = h.runtime.createSession({ workspacePath: h.workspace });
    await h.settle(h.runtime.submitTurn(planner.id, 'delegate: anything').done);
    const plannerEvents = persisted(h, planner.id);
    const failed = byType(plannerEvents, 'delegate.failed')[0]!.payload;
    const workerSpend = Number(failed.worker_total_cost_usd);
    expect(workerSpend).toBeGreaterThan(0);
    expect(h.runtime.getSession(planner.id).cost_so_far_usd).toBeCloseTo(
      sumOf(plannerEvents) + workerSpend,
      8,
    );
  });
});

/** A worker model: a paid first call that asks for current_time, then a failing second call. */
function failsAfterFirstCall(): ModelAdapter {
  return {
    provider: 'failing',
    async *stream(request: ModelRequest): AsyncGenerator<AdapterChunk, AdapterResult, void> {
      if (request.messages.at(-1)!.role === 'tool') {
        throw new AdapterError('server_error', 'the provider fell over');
      }
      yield { kind: 'tool_use_start', index: 0, tool_use_id: 'tu_worker_1', tool_name: 'current_time' };
      yield { kind: 'tool_use_end', index: 0, tool_use_id: 'tu_worker_1', final_input: {} };
      return { stop_reason: 'tool_use', usage: USAGE, provider_request_id: 'w1' };
    },
  };
}
