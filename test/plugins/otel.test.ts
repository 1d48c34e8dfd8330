import { describe, expect, it } from 'vitest';
import { isoToMicros } from '../../src/core/events/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { startRuntime } from '../helpers/runtime.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { emitTurn } from './plugin-harness.js';
import { otlpReceiver, receiver, until } from './receivers.js';

const nanos = (iso: string) => BigInt(isoToMicros(iso)) * 1000n;

describe('otel', () => {
  it('exports turn, LLM call and tool spans with GenAI attributes and parent/child from the causal chain', async () => {
    const { endpoint, spans, contentTypes } = await otlpReceiver();
    const context = tempTraceContext();
    const loaded = await loadPlugins([['otel', { endpoint, service_name: 'metis-test' }]], {
      configPath: null,
    });
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: silentLogger(),
      dataDir: tempDir(),
    });

    const events = emitTurn(context.bus, 'sess_otel');
    await context.flush();
    expect(host.list()[0]).toMatchObject({ fast_path: false, delivered: 8, failed: 0 });
    await host.stop(); // flushes the batch processor

    expect(contentTypes.every((t) => t.startsWith('application/json'))).toBe(true);
    expect(spans.map((s) => s.name).sort()).toEqual([
      'chat claude-test',
      'chat claude-test',
      'execute_tool current_time',
      'invoke_agent metis',
    ]);
    const turn = spans.find((s) => s.name === 'invoke_agent metis')!;
    const chats = spans.filter((s) => s.name.startsWith('chat '));
    const tool = spans.find((s) => s.name.startsWith('execute_tool'))!;

    // One trace; the turn is the root, LLM calls and the tool call are its children.
    expect(new Set(spans.map((s) => s.traceId)).size).toBe(1);
    expect(turn.parentSpanId).toBe('');
    for (const child of [...chats, tool]) expect(child.parentSpanId).toBe(turn.spanId);
    expect(turn.resource['service.name']).toBe('metis-test');

    expect(turn.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.conversation.id': 'sess_otel',
      'gen_ai.usage.input_tokens': 290,
      'gen_ai.usage.output_tokens': 42,
      'metis.turn_id': 'turn_1',
    });
    const [first, second] = chats.sort((a, b) => Number(a.startNanos - b.startNanos));
    expect(first!.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'anthropic',
      'gen_ai.request.model': 'claude-test',
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 30,
      'gen_ai.response.finish_reasons': ['tool_use'],
    });
    expect(second!.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 170,
      'gen_ai.usage.output_tokens': 12,
    });
    expect(tool.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'current_time',
      'gen_ai.tool.call.id': 'tu_1',
    });
    // Spans carry the events' own times: start at the starting event, end at the ending one.
    expect(turn.startNanos).toBe(nanos(events.turn!.timestamp));
    expect(turn.endNanos).toBe(nanos(events.completed!.timestamp));
    expect(first!.startNanos).toBe(nanos(events.call1!.timestamp));
    expect(first!.endNanos).toBe(nanos(events.done1!.timestamp));
    expect(tool.startNanos).toBe(nanos(events.tool!.timestamp));
    expect(tool.endNanos).toBe(nanos(events.toolDone!.timestamp));
    for (const span of spans) expect(span.status.code ?? 0).toBe(0);
  });

  it('marks failed calls and cancelled turns as errors and ends spans a cancel cut short', async () => {
    const { endpoint, spans } = await otlpReceiver();
    const context = tempTraceContext();
    const loaded = await loadPlugins([['otel', { endpoint }]], { configPath: null });
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: silentLogger(),
      dataDir: tempDir(),
    });
    const bus = context.bus;
    const emit = (type: string, parent: string | null, payload: Record<string, unknown>) =>
      bus.emitDynamic({ type, session_id: 'sess_c', turn_id: 'turn_c', parent_event_id: parent, payload })!;
    const turn = emit('turn.started', null, {
      user_message_hash: 'a'.repeat(64),
      user_message_text_redacted: null,
      estimated_input_tokens: 1,
      has_images: false,
      has_tool_calls_in_history: false,
    });
    const call = emit('llm.call_started', turn.id, {
      model: 'openai:gpt-x',
      provider: 'openai',
      estimated_input_tokens: 1,
      request_id: 'r',
      is_worker: false,
    });
    emit('llm.call_failed', call.id, {
      model: 'openai:gpt-x',
      provider: 'openai',
      error_class: 'rate_limit',
      error_message_redacted: 'slow down',
      retry_count: 2,
      latency_ms: 10,
    });
    // route.decided is outside the plugin's filter: the next call's turn is found through the store.
    const route = emit('route.decided', turn.id, {
      chosen_model: 'openai:gpt-x',
      winner_index: 0,
      elapsed_ms: 0.1,
      chain: [],
    });
    await context.flush();
    const retry = emit('llm.call_started', route.id, {
      model: 'openai:gpt-x',
      provider: 'openai',
      estimated_input_tokens: 1,
      request_id: 'r2',
      is_worker: false,
    });
    emit('turn.cancelled', turn.id, { reason: 'user_cancel', partial_llm_calls: 2, partial_tool_calls: 0 });
    await context.flush();
    await host.stop();

    const byName = (name: string) => spans.filter((s) => s.name === name);
    const [turnSpan] = byName('invoke_agent metis');
    expect(turnSpan!.status).toMatchObject({ code: 2 });
    expect(turnSpan!.attributes).toMatchObject({
      'error.type': 'cancelled',
      'metis.cancel_reason': 'user_cancel',
    });
    const chats = byName('chat gpt-x');
    expect(chats).toHaveLength(2);
    const failed = chats.find((s) => s.attributes['metis.request_id'] === 'r')!;
    expect(failed.status).toEqual({ code: 2, message: 'slow down' });
    expect(failed.attributes['error.type']).toBe('rate_limit');
    const cut = chats.find((s) => s.attributes['metis.request_id'] === 'r2')!;
    expect(cut.parentSpanId).toBe(turnSpan!.spanId);
    expect(cut.attributes['metis.incomplete']).toBe(true);
    expect(cut.endNanos).toBe(turnSpan!.endNanos);
    expect(retry).not.toBeNull();
  });

  it("puts a delegated worker turn under the planner's delegate tool span, in the planner's trace", async () => {
    const { endpoint, spans } = await otlpReceiver();
    const h = startRuntime();
    const loaded = await loadPlugins([['otel', { endpoint }]], { configPath: null });
    const host = await startPlugins(loaded, {
      bus: h.context.bus,
      store: h.context.store,
      logger: silentLogger(),
      dataDir: tempDir(),
    });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'delegate: summarize the sea');
    await h.settle(done);
    await host.stop();

    const turns = spans.filter((s) => s.name === 'invoke_agent metis');
    expect(turns).toHaveLength(2);
    const delegateTool = spans.find((s) => s.name === 'execute_tool delegate')!;
    const planner = turns.find((s) => s.parentSpanId === '')!;
    const worker = turns.find((s) => s !== planner)!;
    expect(delegateTool.parentSpanId).toBe(planner.spanId);
    expect(worker.parentSpanId).toBe(delegateTool.spanId);
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([planner.traceId]));
    const workerChats = spans.filter((s) => s.name.startsWith('chat ') && s.parentSpanId === worker.spanId);
    expect(workerChats.length).toBeGreaterThan(0);
  });

  it('warns once, naming the endpoint, when exports fail, and says when they work again (issue 29)', async () => {
    const collector = await receiver([500, 500]); // two failed exports, then 200
    const logs = captureLogs('info');
    const context = tempTraceContext();
    const loaded = await loadPlugins(
      [['otel', { endpoint: collector.url, scheduled_delay_ms: 20, timeout_ms: 2000 }]],
      { configPath: null },
    );
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: logs.logger,
      dataDir: tempDir(),
    });
    // One export per turn: each waits for the one before to be answered.
    for (const [n, session] of ['sess_a', 'sess_b', 'sess_c'].entries()) {
      emitTurn(context.bus, session);
      await context.flush();
      await until(() => collector.requests.length > n);
    }
    await host.stop();
    await settleLogs();
    const failed = logs.records.filter((r) => r.msg.startsWith('otel export failed'));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ level: LEVEL.warn, endpoint: collector.url, plugin: 'otel' });
    const back = logs.records.filter((r) => r.msg === 'otel export works again');
    expect(back).toHaveLength(1);
    expect(back[0]).toMatchObject({ level: LEVEL.info, spans_dropped: 8 });
  }, 30_000);
});
