import { describe, expect, it } from 'vitest';
import { checkOtlp } from '../../src/commands/doctor-otel.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { silentLogger } from '../../src/core/logger.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { freePort } from '../helpers/free-port.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { startRuntime } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';
import { emitTurn } from './plugin-harness.js';
import { otlpReceiver, receiver, until } from './receivers.js';

/**
 * Issue 30 (OTLP for tracing backends): spans carry the session as Langfuse-style backends group them,
 * content is opt-in per the GenAI semantic conventions, export failures are said once per reason with
 * the endpoint, and `metis doctor` probes the endpoint. Against a real OTLP/HTTP receiver on port 0.
 */
async function exportTurn(options: Record<string, unknown>, message: string) {
  const { endpoint, spans } = await otlpReceiver();
  const h = startRuntime();
  const loaded = await loadPlugins([['otel', { endpoint, ...options }]], { configPath: null });
  const host = await startPlugins(loaded, {
    bus: h.context.bus,
    store: h.context.store,
    logger: silentLogger(),
    dataDir: tempDir(),
  });
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  const { done } = h.runtime.submitTurn(session.id, message);
  await h.settle(done);
  await host.stop();
  return { spans, sessionId: session.id };
}

const json = (value: unknown) => JSON.parse(String(value));

describe('otel: sessions and content', () => {
  it('puts session.id and langfuse.session.id on every span, and no content unless asked', async () => {
    const { spans, sessionId } = await exportTurn({}, 'think: time');
    expect(spans.length).toBe(4);
    for (const span of spans)
      expect(span.attributes).toMatchObject({ 'session.id': sessionId, 'langfuse.session.id': sessionId });
    for (const span of spans) {
      expect(span.attributes['gen_ai.input.messages']).toBeUndefined();
      expect(span.attributes['gen_ai.output.messages']).toBeUndefined();
      expect(span.attributes['gen_ai.tool.call.arguments']).toBeUndefined();
    }
  });

  it('with capture_content, carries the input and output messages, and the tool call, per the GenAI conventions', async () => {
    const { spans } = await exportTurn({ capture_content: true }, 'think: time');
    const chats = spans
      .filter((s) => s.name.startsWith('chat '))
      .sort((a, b) => Number(a.startNanos - b.startNanos));
    const [first, second] = chats;
    expect(json(first!.attributes['gen_ai.input.messages'])).toEqual([
      { role: 'user', parts: [{ type: 'text', content: 'think: time' }] },
    ]);
    const answer = json(first!.attributes['gen_ai.output.messages']);
    expect(answer).toHaveLength(1);
    expect(answer[0]).toMatchObject({ role: 'assistant', finish_reason: 'tool_call' });
    expect(answer[0].parts.map((p: any) => p.type)).toEqual(['reasoning', 'text', 'tool_call']);
    expect(answer[0].parts[2]).toMatchObject({ name: 'current_time', arguments: {} });
    // The second call was sent the user's message, the first answer and the tool's result.
    const input = json(second!.attributes['gen_ai.input.messages']);
    expect(input.map((m: any) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(input[2].parts[0]).toMatchObject({ type: 'tool_call_response', id: answer[0].parts[2].id });
    expect(json(second!.attributes['gen_ai.output.messages'])[0]).toMatchObject({ finish_reason: 'stop' });

    const tool = spans.find((s) => s.name === 'execute_tool current_time')!;
    expect(json(tool.attributes['gen_ai.tool.call.arguments'])).toEqual({});
    expect(String(tool.attributes['gen_ai.tool.call.result'])).toMatch(/\d{4}-\d{2}-\d{2}/);

    const turn = spans.find((s) => s.name === 'invoke_agent metis')!;
    expect(json(turn.attributes['gen_ai.input.messages'])[0].parts[0].content).toBe('think: time');
    expect(json(turn.attributes['gen_ai.output.messages'])[0].parts[0].content).toContain(
      'The tool returned',
    );
  });

  it('cuts content at content_max_chars', async () => {
    const { spans } = await exportTurn(
      { capture_content: true, content_max_chars: 20 },
      `${'long '.repeat(20)}words`,
    );
    const chat = spans.find((s) => s.name.startsWith('chat '))!;
    const text = String(chat.attributes['gen_ai.input.messages']);
    expect(text.endsWith('…[truncated]')).toBe(true);
    expect(text.length).toBe(20 + '…[truncated]'.length);
  });
});

describe('otel: export failures and the doctor probe', () => {
  it('warns once per reason, naming the endpoint and the reason, and logs the recovery', async () => {
    const collector = await receiver([401, 401, 400]); // then 200
    const logs = captureLogs('info');
    const context = startRuntime().context;
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
    for (const [n, session] of ['sess_a', 'sess_b', 'sess_c', 'sess_d'].entries()) {
      emitTurn(context.bus, session);
      await context.flush();
      await until(() => collector.requests.length > n);
    }
    await host.stop();
    await settleLogs();
    const failed = logs.records.filter((r) => r.msg.startsWith('otel export failed'));
    expect(failed.map((r) => r.reason)).toEqual(['HTTP 401', 'HTTP 400']);
    for (const record of failed) {
      expect(record).toMatchObject({ level: LEVEL.warn, endpoint: collector.url });
      expect(record.msg).toContain(collector.url);
    }
    const back = logs.records.filter((r) => r.msg === 'otel export works again');
    expect(back).toHaveLength(1);
    expect(back[0]).toMatchObject({ level: LEVEL.info, spans_dropped: 12, endpoint: collector.url });
  }, 30_000);

  it('says a refused connection is the reason when nothing listens', async () => {
    const logs = captureLogs('info');
    const context = startRuntime().context;
    const endpoint = `http://127.0.0.1:${await freePort()}/v1/traces`;
    const loaded = await loadPlugins([['otel', { endpoint, scheduled_delay_ms: 20, timeout_ms: 2000 }]], {
      configPath: null,
    });
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: logs.logger,
      dataDir: tempDir(),
    });
    emitTurn(context.bus, 'sess_refused');
    await context.flush();
    await until(() => logs.records.some((r) => r.msg.startsWith('otel export failed')), 10_000);
    await host.stop();
    await settleLogs();
    const failed = logs.records.filter((r) => r.msg.startsWith('otel export failed'));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ endpoint, reason: 'ECONNREFUSED' });
  }, 30_000);

  it('metis doctor probes the endpoint: ok when it takes an export, a warning with the status otherwise', async () => {
    const { endpoint } = await otlpReceiver();
    const config = (plugin: Record<string, unknown>) =>
      MetisConfigSchema.parse({ plugins: [['otel', plugin]] });
    expect(await checkOtlp(config({ endpoint }))).toMatchObject({ status: 'ok' });
    const refusing = await receiver([401]);
    expect(await checkOtlp(config({ endpoint: refusing.url }))).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('401'),
    });
    const nobody = `http://127.0.0.1:${await freePort()}/v1/traces`;
    expect(await checkOtlp(config({ endpoint: nobody }))).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('ECONNREFUSED'),
    });
    expect(await checkOtlp(MetisConfigSchema.parse({}))).toBeNull();
  });
});
