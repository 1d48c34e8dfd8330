import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { sqliteTraceQueryReads } from '../../src/core/store/trace-query-reads.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { otlpReceiver } from './receivers.js';

/**
 * `otel` where the trace is not in a file of this process (PostgreSQL alone): a call whose parent is
 * outside its filter and no longer in the host's memory has its turn found through the asynchronous
 * causal chain, so the span is still the turn's child. The reads here are a SQLite file's asynchronous
 * adapter, the same contract PostgreSQL's answers (test/store/trace-query-contract.test.ts).
 */
describe('otel on a store read asynchronously', () => {
  it("links a call to its turn through the store when the host's memory no longer holds the parents", async () => {
    const { endpoint, spans } = await otlpReceiver();
    const context = tempTraceContext();
    const loaded = await loadPlugins([['otel', { endpoint, session_ids: ['sess_c'] }]], { configPath: null });
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: { reads: sqliteTraceQueryReads(context.store), writer: context.writer },
      logger: silentLogger(),
      dataDir: tempDir(),
      recentEvents: 4,
    });
    const emit = (type: string, sessionId: string, parent: string | null, payload: Record<string, unknown>) =>
      context.bus.emitDynamic({
        type,
        session_id: sessionId,
        turn_id: 'turn_c',
        parent_event_id: parent,
        payload,
      })!;
    const route = (sessionId: string, parent: string | null) =>
      emit('route.decided', sessionId, parent, {
        chosen_model: 'openai:gpt-x',
        winner_index: 0,
        elapsed_ms: 0.1,
        chain: [],
      });
    const turn = emit('turn.started', 'sess_c', null, {
      user_message_hash: 'a'.repeat(64),
      user_message_text_redacted: null,
      estimated_input_tokens: 1,
      has_images: false,
      has_tool_calls_in_history: false,
    });
    // route.decided is outside otel's filter; the events of another session push it out of memory.
    const routed = route('sess_c', turn.id);
    for (let i = 0; i < 5; i += 1) route('sess_other', null);
    await context.flush();
    const call = emit('llm.call_started', 'sess_c', routed.id, {
      model: 'openai:gpt-x',
      provider: 'openai',
      estimated_input_tokens: 1,
      request_id: 'r',
      is_worker: false,
    });
    emit('llm.call_failed', 'sess_c', call.id, {
      model: 'openai:gpt-x',
      provider: 'openai',
      error_class: 'rate_limit',
      error_message_redacted: 'slow down',
      retry_count: 0,
      latency_ms: 1,
    });
    await context.flush();
    expect(host.list()[0]).toMatchObject({ failed: 0 });
    expect(host.list()[0]!.stats).toMatchObject({ orphans: 0 });
    await host.stop();

    const turnSpan = spans.find((s) => s.name === 'invoke_agent metis')!;
    const chat = spans.find((s) => s.name === 'chat gpt-x')!;
    expect(chat.parentSpanId).toBe(turnSpan.spanId);
    expect(chat.traceId).toBe(turnSpan.traceId);
  });
});
