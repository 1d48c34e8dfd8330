import { request as httpRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { MAX_MODEL_LABELS } from '../../src/core/api/metrics-tally.js';
import { emitPadded } from '../helpers/flood.js';
import { scrape, sum } from '../helpers/prometheus.js';
import {
  closedWithin,
  eventIdDaysAgo,
  lastEventId,
  subscribe,
  subscribeReply,
  waitForEvents,
} from '../helpers/protocol.js';
import { startTestServer, type TestClient } from '../helpers/server.js';

/** Issue 12, "Operator visibility": `GET /metrics` in the Prometheus text format, per server. */

const MIB = 1024 * 1024;

const ended = (client: TestClient, turnId: string) =>
  waitForEvents(
    client,
    (e) => (e.type === 'turn.completed' || e.type === 'turn.cancelled') && e.turn_id === turnId,
    1,
    30_000,
  );

/** One request with exactly these headers (fetch cannot set `Host`). */
function rawGet(url: string, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  const target = new URL('/metrics', url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: target.hostname, port: target.port, path: '/metrics', headers, agent: false },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => {
          text += chunk.toString('utf8');
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: text.startsWith('{') ? JSON.parse(text) : text }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('GET /metrics', () => {
  it('counts real turns by outcome, model calls, tokens and cost by model, and every emitted event as committed', async () => {
    // No cool-down: the auth failure below takes the scripted provider out of routing, and the
    // cancelled turn after it must still run.
    const t = await startTestServer({
      scripted: { slow_token_delay_ms: 5, slow_tokens: 400 },
      provider_health: { cooldown_seconds: 0 },
    });
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    for (const message of ['hello', 'time', 'slow: a short answer'])
      await ended(client, await t.submit(sessionId, message));
    await ended(client, await t.submit(sessionId, 'fail: auth'));
    const cancelled = await t.submit(sessionId, 'slow: a long answer, cancelled');
    await waitForEvents(client, (e) => e.type === 'text.delta' && e.turn_id === cancelled);
    client.send({ type: 'cancel', turn_id: cancelled });
    await ended(client, cancelled);
    await t.context.flush();

    const m = await scrape(t.url);
    expect(m.type('metis_turns_total')).toBe('counter');
    expect(m.value('metis_turns_total', { outcome: 'completed' })).toBe(3);
    expect(m.value('metis_turns_total', { outcome: 'failed' })).toBe(1);
    expect(m.value('metis_turns_total', { outcome: 'cancelled' })).toBe(1);

    // Model calls, tokens and cost agree with what the events themselves say, model by model.
    const events = client.events();
    const completed = events.filter((e) => e.type === 'llm.call_completed');
    const failed = events.filter((e) => e.type === 'llm.call_failed');
    expect(completed.length).toBeGreaterThanOrEqual(4); // `time` makes two calls
    for (const model of new Set(completed.map((e) => String(e.payload.model)))) {
      const mine = completed.filter((e) => e.payload.model === model);
      expect(m.value('metis_model_calls_total', { model, outcome: 'completed' })).toBe(mine.length);
      const total = (field: string) => mine.reduce((n, e) => n + e.payload[field], 0);
      expect(m.value('metis_model_tokens_total', { model, kind: 'input' })).toBe(total('input_tokens'));
      expect(m.value('metis_model_tokens_total', { model, kind: 'output' })).toBe(total('output_tokens'));
      expect(total('output_tokens')).toBeGreaterThan(0);
      expect(m.value('metis_model_cost_usd_total', { model })).toBeCloseTo(total('cost_usd'), 9);
    }
    expect(failed.map((e) => e.payload.error_class).sort()).toEqual(['auth', 'cancelled']);
    const failedModel = String(failed[0].payload.model);
    expect(m.value('metis_model_calls_total', { model: failedModel, outcome: 'auth' })).toBe(1);
    expect(m.value('metis_model_calls_total', { model: failedModel, outcome: 'cancelled' })).toBe(1);

    // Every bus event emitted since the server started is committed once the bus is flushed (and a few
    // emitted just before it started, in the same tick: the trace writer's own registration).
    const families = m.series('metis_events_emitted_total').map(([labels]) => labels.family!);
    expect(families).toEqual(
      expect.arrayContaining(['turn', 'llm', 'route', 'tool', 'session', 'bus', 'streaming']),
    );
    for (const family of families.filter((f) => f !== 'streaming')) {
      const emitted = m.value('metis_events_emitted_total', { family })!;
      const committed = m.value('metis_events_committed_total', { family })!;
      if (family === 'bus') expect(committed, family).toBeGreaterThanOrEqual(emitted);
      else expect(committed, family).toBe(emitted);
    }
    expect(sum(m, 'metis_events_dropped_total')).toBe(0);
    expect(m.value('metis_events_committed_total', { family: 'turn' })).toBe(
      events.filter((e) => e.type.startsWith('turn.')).length,
    );
    // Streaming deltas are their own family, counted as emitted and never committed.
    expect(m.value('metis_events_emitted_total', { family: 'streaming' })).toBe(
      events.filter((e) => e.seq === null).length,
    );
    expect(m.value('metis_events_committed_total', { family: 'streaming' })).toBeUndefined();
    // The batch-size histogram sums to what was committed; each committed batch was timed.
    expect(m.type('metis_trace_commit_duration_seconds')).toBe('histogram');
    expect(m.value('metis_trace_commit_batch_events_sum')).toBe(sum(m, 'metis_events_committed_total'));
    const batches = m.value('metis_trace_commit_batch_events_count')!;
    expect(batches).toBeGreaterThan(0);
    expect(m.value('metis_trace_commit_duration_seconds_count')).toBe(batches);
    expect(m.value('metis_trace_write_retries_total')).toBe(0);
    expect(m.value('metis_stream_connections')).toBe(1);
    // Low cardinality: no session or turn id ever becomes a label.
    expect(m.text).not.toContain(sessionId);
    expect(m.text).not.toMatch(/turn_[0-9A-Z]{26}/);
  });

  it('counts a turn the runtime marked failed (signals_extra.failure) as failed, and folds model names past the cap into "other"', async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    // What crash recovery and a turn failing from inside emit: a turn.completed whose one model call
    // completed, marked failed by signals_extra.
    t.context.bus.emit({
      type: 'turn.completed',
      session_id: sessionId,
      turn_id: 'turn_recovered',
      payload: {
        stop_reason: 'end_turn',
        llm_call_count: 1,
        tool_call_count: 0,
        total_input_tokens: 0,
        total_output_tokens: 0,
        total_cost_usd: 0,
        wall_time_seconds: 0,
        signals_extra: { failure: 'server_stopped' },
      },
    });
    // A client may name any model: distinct names beyond MAX_MODEL_LABELS share one label.
    for (let i = 0; i < MAX_MODEL_LABELS + 10; i += 1) {
      t.context.bus.emit({
        type: 'llm.call_failed',
        session_id: sessionId,
        turn_id: `turn_${i}`,
        payload: {
          model: `scripted:made-up-${i}`,
          provider: 'scripted',
          error_class: 'server_error',
          error_message_redacted: 'no',
          retry_count: 0,
          latency_ms: 1,
        },
      });
    }
    await t.context.flush();
    const m = await scrape(t.url);
    expect(m.value('metis_turns_total', { outcome: 'failed' })).toBe(1);
    expect(m.value('metis_turns_total', { outcome: 'completed' }) ?? 0).toBe(0);
    const models = new Set(m.series('metis_model_calls_total').map(([labels]) => labels.model));
    expect(models.size).toBe(MAX_MODEL_LABELS + 1);
    expect(m.value('metis_model_calls_total', { model: 'other', outcome: 'server_error' })).toBe(10);
  });

  it('counts a client_too_slow close (after its lag warning), a served replay with its size, and a cursor_expired', async () => {
    const t = await startTestServer(
      {},
      { stream: { maxQueueEvents: 50, maxQueueBytes: 256 * MIB, socketHighWaterMark: 1024 } },
    );
    const sessionId = await t.createSession();
    const { client: stalled } = await subscribe(t, sessionId);
    const socket = (stalled.ws as any)._socket;
    socket.pause();
    for (let round = 0; round < 500 && t.server.hub.connectionCount() === 1; round += 1)
      await emitPadded(t, sessionId, 10);
    expect(t.server.hub.connectionCount()).toBe(0);
    socket.resume();
    expect((await closedWithin(stalled)).code).toBe(1008);
    expect(stalled.frames.filter((f) => f.type === 'lag_warning')).toHaveLength(1);

    let m = await scrape(t.url);
    expect(m.value('metis_stream_closes_total', { reason: 'client_too_slow' })).toBe(1);
    expect(m.value('metis_stream_lag_warnings_total')).toBe(1);
    expect(m.value('metis_stream_connections')).toBe(0);
    expect(m.value('metis_stream_replays_total', { outcome: 'served' })).toBe(0);

    const since = lastEventId(stalled)!;
    expect(since).not.toBeNull();
    const again = await subscribe(t, sessionId, { since, snapshot: false });
    expect(again.ack.replay_event_count).toBeGreaterThan(0);
    const expired = await subscribeReply(await t.attach(sessionId), {
      filter: 'preset:full',
      since: eventIdDaysAgo(100),
      snapshot: false,
    });
    expect(expired).toMatchObject({ type: 'subscribe_error', code: 'cursor_expired' });

    m = await scrape(t.url);
    expect(m.value('metis_stream_replays_total', { outcome: 'served' })).toBe(1);
    expect(m.value('metis_stream_replays_total', { outcome: 'cursor_expired' })).toBe(1);
    expect(m.value('metis_stream_replay_events_count')).toBe(1);
    expect(m.value('metis_stream_replay_events_sum')).toBe(again.ack.replay_event_count);
    expect(m.value('metis_stream_closes_total', { reason: 'client_too_slow' })).toBe(1);
    expect(m.value('metis_stream_connections')).toBe(2);
  });

  it('reports the plugins’ errors and timeouts by plugin name', async () => {
    const plugins = [
      { name: 'audit-log', failed: 3, timeouts: 1 },
      { name: 'counter', failed: 0 },
    ];
    const t = await startTestServer({}, { metrics: { plugins: () => plugins } });
    const m = await scrape(t.url);
    expect(m.value('metis_plugin_errors_total', { plugin: 'audit-log' })).toBe(3);
    expect(m.value('metis_plugin_timeouts_total', { plugin: 'audit-log' })).toBe(1);
    expect(m.value('metis_plugin_errors_total', { plugin: 'counter' })).toBe(0);
    expect(m.value('metis_plugin_timeouts_total', { plugin: 'counter' })).toBe(0);
  });
});

describe('GET /metrics follows the access rules of every other route', () => {
  it('refuses a non-loopback Host or a foreign Origin with 403, and any method but GET and HEAD with 405', async () => {
    const t = await startTestServer();
    expect(await rawGet(t.url, { host: 'evil.example' })).toMatchObject({
      status: 403,
      body: { error: { code: 'METIS_ERR_FORBIDDEN_HOST' } },
    });
    expect(await rawGet(t.url, { host: 'localhost.evil.example' })).toMatchObject({ status: 403 });
    const foreign = await fetch(`${t.url}/metrics`, { headers: { origin: 'https://evil.example' } });
    expect(foreign.status).toBe(403);
    expect(((await foreign.json()) as any).error.code).toBe('METIS_ERR_FORBIDDEN_ORIGIN');
    expect((await rawGet(t.url, { host: `localhost:${t.server.port}` })).status).toBe(200);
    const post = await fetch(`${t.url}/metrics`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(((await post.json()) as any).error.code).toBe('METIS_ERR_METHOD_NOT_ALLOWED');
    const head = await fetch(`${t.url}/metrics`, { method: 'HEAD' });
    expect(head.status).toBe(200);
  });

  it('with a bearer token, answers 401 without it and the metrics with it', async () => {
    const token = 'metrics-bearer-token-0123456789';
    const t = await startTestServer({}, { host: '0.0.0.0', bearerToken: token });
    const url = `http://127.0.0.1:${t.server.port}`;
    const refused = await fetch(`${url}/metrics`);
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as any).error.code).toBe('METIS_ERR_UNAUTHORIZED');
    expect((await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    const m = await scrape(url, { authorization: `Bearer ${token}` });
    expect(m.value('metis_stream_connections')).toBe(0);
  });
});
