import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startServer } from '../../src/core/app/metis-server.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { defineTool, type Tool } from '../../src/core/runtime/tools/tool.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { eventually } from '../helpers/protocol.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';
import { startTestServer, type TestClient } from '../helpers/server.js';
import { startReplayServer } from '../helpers/sse-server.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/** Waits for the turn's end (`turn.completed` or `turn.cancelled`) on an attached client. */
function turnEnd(client: TestClient, turnId: string) {
  return client.waitFor(
    (f) =>
      f.type === 'event' &&
      f.event.turn_id === turnId &&
      (f.event.type === 'turn.completed' || f.event.type === 'turn.cancelled'),
    15_000,
  );
}

/** A client attached to the session and subscribed to every event type, from now on. */
async function subscribedFull(
  server: { attach(sessionId: string): Promise<TestClient> },
  sessionId: string,
): Promise<TestClient> {
  const client = await server.attach(sessionId);
  client.send({ type: 'subscribe', filter: 'preset:full', since: null, snapshot: false });
  await client.waitFor((f) => f.type === 'subscribe_ack');
  return client;
}

const typesOf = (client: TestClient, turnId: string) =>
  client
    .events()
    .filter((e) => e.turn_id === turnId)
    .map((e) => e.type)
    .filter((t) => !t.endsWith('.delta'));

/**
 * `current_time` replaced by a tool that declares a side effect the catalog does not know (a plugin
 * tool's typo): its `tool.called` fails validation. Later tools replace earlier ones of the same name.
 */
const oddTool = defineTool({
  name: 'current_time',
  description: 'the time, with a side effect no catalog knows',
  inputSchema: z.object({}),
  sideEffects: 'telepathy' as unknown as 'none',
  execute: async () => ({ content: 'noon' }),
}) as Tool;

/** A server on port 0 like startTestServer, with the bus validation mode and extra tools chosen. */
async function serverWith(validation: 'strict' | 'lenient', tools: Tool[], config: RuntimeConfigInput = {}) {
  const logs = captureLogs();
  const context = tempTraceContext({ validation, logger: logs.logger });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: testRuntimeConfig(config),
    tools,
    logger: logs.logger,
  });
  const server = await startServer(runtime, context, { port: 0 });
  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as any };
  };
  const workspace = tempDir('metis-ws-');
  return {
    runtime,
    context,
    close: async () => {
      await server.close();
      await runtime.close();
    },
    createSession: async () =>
      (await request('POST', '/sessions', { workspace_path: workspace })).body.session_id,
    submit: async (sessionId: string, message: string) =>
      (await request('POST', `/sessions/${sessionId}/turns`, { message })).body.turn_id as string,
    attach: async (sessionId: string) => {
      const handshake = await request('GET', `/sessions/${sessionId}`);
      const { openClient } = await import('../helpers/server.js');
      return openClient(handshake.body.ws_url);
    },
    healthz: async () => (await request('GET', '/healthz')).status,
    logs,
  };
}

describe('a turn that fails never takes the server down (issue 12, observation 1)', () => {
  it('an openai-compatible provider reusing tool-call id call_ReadNotes in a later turn: both turns complete', async () => {
    const replay = await startReplayServer([
      { fixture: 'openai-tool-call.sse' },
      { fixture: 'openai-tool-answer.sse' },
      { fixture: 'openai-tool-call.sse' },
      { fixture: 'openai-tool-answer.sse' },
    ]);
    const t = await startTestServer({
      default_model: 'ollama:llama3.2:3b',
      providers: { ollama: { kind: 'openai-compatible', base_url: `${replay.url}/v1` } },
    });
    const { writeFileSync } = await import('node:fs');
    writeFileSync(`${t.workspace}/notes.txt`, 'hello from the notes\n');
    const sessionId = await t.createSession();
    const client = await subscribedFull(t, sessionId);

    const ends = [];
    for (const message of ['Read my notes', 'Read them again']) {
      const turnId = await t.submit(sessionId, message);
      ends.push(await turnEnd(client, turnId));
      expect(typesOf(client, turnId)).toContain('tool.completed');
    }
    expect(ends.map((e) => [e.event.type, e.event.payload.signals_extra])).toEqual([
      ['turn.completed', null],
      ['turn.completed', null],
    ]);
    await t.context.flush();
    const rows = t.context.db
      .prepare('SELECT id, turn_id, status FROM tool_calls WHERE session_id = ? ORDER BY row_id')
      .all(sessionId) as { id: string; turn_id: string; status: string }[];
    expect(rows.map((r) => [r.id, r.status])).toEqual([
      ['call_ReadNotes', 'completed'],
      ['call_ReadNotes', 'completed'],
    ]);
    expect(new Set(rows.map((r) => r.turn_id)).size).toBe(2);
    await replay.close();
  });

  it('a storage write refused mid-turn (a SQLite trigger RAISE on messages): the row alone is dropped, the turn ends, the next turn runs', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    const other = await t.createSession();
    const client = await subscribedFull(t, sessionId);
    t.context.db.exec(`
      CREATE TRIGGER refuse_assistant BEFORE INSERT ON messages WHEN NEW.role = 'assistant'
      BEGIN SELECT RAISE(ABORT, 'disk says no'); END;`);

    // Session-store rows go through the trace writer's queue: a row refused for its own sake is
    // dropped alone (with an ERROR log) and never thrown into the turn, whose events are all stored.
    const failed = await t.submit(sessionId, 'hello there');
    const end = await turnEnd(client, failed);
    expect(end.event.type).toBe('turn.completed');
    expect(typesOf(client, failed)).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'message.start',
      'message.complete',
      'llm.call_completed',
      'turn.completed',
    ]);
    await t.context.flush();
    expect(t.context.writer.stats.rejectedRows).toBe(1);
    expect(end.event.parent_event_id).toBe(client.events().find((e) => e.type === 'turn.started').id);

    // The server, its other sessions and this session carry on.
    expect((await t.request('GET', '/healthz')).status).toBe(200);
    t.context.db.exec('DROP TRIGGER refuse_assistant');
    const next = await t.submit(sessionId, 'hello again');
    const nextEnd = await turnEnd(client, next);
    expect(nextEnd.event.payload.signals_extra).toBeNull();
    const otherTurn = await t.submit(other, 'and hello here');
    expect(otherTurn).toMatch(/^turn_/);
    await t.context.flush();
    const stored = t.context.db
      .prepare("SELECT type FROM events WHERE turn_id = ? AND type LIKE 'turn.%' ORDER BY id")
      .pluck()
      .all(failed);
    expect(stored).toEqual(['turn.started', 'turn.completed']);
    const assistantRows = t.context.db
      .prepare("SELECT count(*) FROM messages WHERE turn_id = ? AND role = 'assistant'")
      .pluck()
      .get(failed);
    expect(assistantRows).toBe(0);
  });

  it('lenient validation: a dropped tool.called does not end the turn; what follows hangs from its parent', async () => {
    const s = await serverWith('lenient', [oddTool]);
    try {
      const sessionId = await s.createSession();
      const client = await subscribedFull(s, sessionId);
      const turnId = await s.submit(sessionId, 'time');
      const end = await turnEnd(client, turnId);
      expect(end.event.type).toBe('turn.completed');
      expect(end.event.payload.signals_extra).toBeNull();
      const events = client.events().filter((e) => e.turn_id === turnId);
      expect(events.map((e) => e.type)).not.toContain('tool.called');
      const completed = events.find((e) => e.type === 'tool.completed');
      const callCompleted = events.find((e) => e.type === 'llm.call_completed');
      // The dropped tool.called's place in the causal tree is taken by its own parent.
      expect(completed.parent_event_id).toBe(callCompleted.id);
      expect(await s.healthz()).toBe(200);
      await settleLogs();
      expect(s.logs.at(LEVEL.error).map((r) => r.msg)).toEqual([
        expect.stringContaining('dropped invalid event: invalid payload for "tool.called"'),
      ]);
    } finally {
      await s.close();
    }
  });

  it('lenient validation: a turn.completed no schema accepts (token totals past 2^53) is replaced by one that says invalid_terminal_event', async () => {
    // Each call reports 2^52 prompt tokens: every llm.call_completed is valid, their sum in the turn's
    // total_input_tokens is not a safe integer, so lenient validation drops the turn's own end.
    const replay = await startReplayServer([
      { fixture: 'openai-tool-call-huge-usage.sse' },
      { fixture: 'openai-tool-answer-huge-usage.sse' },
    ]);
    const s = await serverWith('lenient', [], {
      default_model: 'ollama:llama3.2:3b',
      providers: { ollama: { kind: 'openai-compatible', base_url: `${replay.url}/v1` } },
    });
    try {
      const sessionId = await s.createSession();
      const client = await subscribedFull(s, sessionId);
      const turnId = await s.submit(sessionId, 'Read my notes');
      const end = await turnEnd(client, turnId);
      const events = client.events().filter((e) => e.turn_id === turnId);
      const started = events.find((e) => e.type === 'turn.started');
      expect(end.event.type).toBe('turn.completed');
      expect(end.event.parent_event_id).toBe(started.id);
      expect(end.event.payload).toMatchObject({
        stop_reason: 'end_turn',
        llm_call_count: 2,
        tool_call_count: 1,
        total_input_tokens: 0,
        total_output_tokens: 0,
        total_cost_usd: 0,
        wall_time_seconds: 0,
        signals_extra: { failure: 'invalid_terminal_event' },
      });
      // Both model calls went out whole: only the terminal event was refused.
      expect(
        events.filter((e) => e.type === 'llm.call_completed').map((e) => e.payload.input_tokens),
      ).toEqual([2 ** 52, 2 ** 52]);
      await settleLogs();
      expect(s.logs.at(LEVEL.error).map((r) => r.msg)).toEqual([
        expect.stringContaining('dropped invalid event: invalid payload for "turn.completed"'),
      ]);

      // Stored once, the session is free again, and the server goes on.
      await s.context.flush();
      const stored = s.context.db
        .prepare("SELECT type FROM events WHERE turn_id = ? AND type LIKE 'turn.%' ORDER BY id")
        .pluck()
        .all(turnId);
      expect(stored).toEqual(['turn.started', 'turn.completed']);
      expect(await eventually(() => s.runtime.getSession(sessionId).current_turn_id === null)).toBe(true);
      expect(await s.healthz()).toBe(200);
    } finally {
      await s.close();
      await replay.close();
    }
  });

  it('strict validation: the same invalid event fails the turn, which still ends with its terminal event', async () => {
    const s = await serverWith('strict', [oddTool]);
    try {
      const sessionId = await s.createSession();
      const client = await subscribedFull(s, sessionId);
      const turnId = await s.submit(sessionId, 'time');
      const end = await turnEnd(client, turnId);
      expect(end.event.payload).toMatchObject({
        llm_call_count: 1,
        signals_extra: { failure: 'internal_error', error_code: 'METIS_ERR_EVENT_VALIDATION' },
      });
      const next = await s.submit(sessionId, 'hello');
      expect((await turnEnd(client, next)).event.payload.signals_extra).toBeNull();
      await settleLogs();
      const failure = s.logs.at(LEVEL.error).find((r) => r.msg.startsWith('turn failed'));
      expect(failure).toMatchObject({ session_id: sessionId, turn_id: turnId });
    } finally {
      await s.close();
    }
  });
});
