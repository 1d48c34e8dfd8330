import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/core/store/database.js';
import { usageByBucket } from '../../src/core/store/usage-stats.js';
import { tempDir } from '../helpers/tmp.js';
import { type Rig, startRig } from './trace-api-rig.js';

/**
 * Issue 30 (scores and money over time): GET /stats/usage gives, per hour or day and per model, the
 * model calls, tokens, cost, latency p50/p95, failures (failed calls and failed turns) and the feedback
 * and eval verdicts, read from the stored events.
 */
describe('GET /stats/usage', () => {
  let rig: Rig;
  let good: string;

  beforeAll(async () => {
    rig = await startRig();
    const session = await rig.createSession();
    good = await rig.runTurn(session, 'think: time');
    await rig.runTurn(session, 'hello');
    await rig.runTurn(session, 'fail: server_error');
    await rig.request('POST', `/sessions/${session}/feedback`, { rating: 'thumbs_up', turn_id: good });
    await rig.request('POST', `/sessions/${session}/feedback`, { rating: 'thumbs_down' });
    await rig.context.flush();
  }, 30_000);
  afterAll(async () => rig?.close());

  const usage = async (query = '') => {
    const answer = await rig.request('GET', `/stats/usage${query}`);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer.body;
  };

  it('sums calls, tokens and cost per model as the stored events have them, with latency and failures', async () => {
    const body = await usage();
    expect(body.bucket).toBe('hour');
    const rows = body.rows.filter((row: any) => row.model === 'scripted:demo');
    const sum = (key: string) => rows.reduce((total: number, row: any) => total + row[key], 0);
    const completed = rig.context.store
      .sessionEvents((await rig.request('GET', '/sessions')).body.sessions[0].id)
      .filter((e) => e.type === 'llm.call_completed');
    expect(sum('calls')).toBe(completed.length);
    expect(sum('calls')).toBe(3);
    expect(sum('input_tokens')).toBe(completed.reduce((t, e) => t + (e.payload as any).input_tokens, 0));
    expect(sum('output_tokens')).toBe(completed.reduce((t, e) => t + (e.payload as any).output_tokens, 0));
    expect(sum('cost_usd')).toBeCloseTo(
      completed.reduce((t, e) => t + (e.payload as any).cost_usd, 0),
      12,
    );
    expect(sum('failed_calls')).toBe(1);
    expect(sum('failed_turns')).toBe(1);
    expect(sum('failures')).toBe(2);
    expect(sum('feedback_up')).toBe(1);
    expect(sum('feedback_down')).toBe(1);
    // Each feedback sets off an eval verdict; the one on the session is counted under its last model.
    for (const row of rows) {
      expect(row.bucket).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:00:00\.000Z$/);
      if (row.calls > 0) expect(row.latency_p95_ms).toBeGreaterThanOrEqual(row.latency_p50_ms);
    }
  });

  it('buckets by day, filters by model, and is empty outside the range', async () => {
    const days = await usage('?bucket=day');
    expect(days.rows.every((row: any) => /T00:00:00\.000Z$/.test(row.bucket))).toBe(true);
    expect((await usage('?model=scripted:other')).rows).toEqual([]);
    expect((await usage('?model=scripted:demo')).rows.length).toBeGreaterThan(0);
    expect((await usage('?from=2000-01-01&to=2000-01-02')).rows).toEqual([]);
  });

  it('answers 400 naming a bad parameter', async () => {
    for (const [query, name] of [
      ['bucket=week', 'bucket'],
      ['from=soon', 'from'],
      ['from=2026-01-02&to=2026-01-01', 'from'],
      ['from=2000-01-01&bucket=hour', 'from'],
      ['colour=red', 'colour'],
    ]) {
      const answer = await rig.request('GET', `/stats/usage?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.message, query).toContain(name);
    }
  });
});

describe('usage rollup: latency percentiles', () => {
  it('reads p50 and p95 from the histogram within half a bin (~4.4%) of the exact values', () => {
    const db = openDatabase(join(tempDir(), 'metis.db'), { create: true });
    db.prepare('INSERT INTO sessions (id, created_at_us, updated_at_us) VALUES (?, 0, 0)').run('sess_l');
    const insert = db.prepare(
      `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
       VALUES ('sess_l', ?, ?, ?, NULL, NULL, 'llm.call_completed', 'agent', 'pseudonymous', ?)`,
    );
    const hour = 3_600_000_000;
    // 1,000 calls of 101..1,100 ms over two hours of one day; exact p50 600 ms, p95 1,050 ms.
    for (let i = 0; i < 1000; i += 1)
      insert.run(
        `evt_${String(i).padStart(26, '0')}`,
        i + 1,
        10 * hour + (i % 2) * hour,
        JSON.stringify({
          model: 'm:x',
          input_tokens: 1,
          output_tokens: 2,
          cost_usd: 0.5,
          latency_ms: 101 + i,
        }),
      );
    const [day] = usageByBucket(db, { fromUs: 0, toUs: 48 * hour, bucket: 'day' });
    expect(day).toMatchObject({
      model: 'm:x',
      calls: 1000,
      input_tokens: 1000,
      output_tokens: 2000,
      cost_usd: 500,
    });
    expect(Math.abs(day!.latency_p50_ms! / 600 - 1)).toBeLessThan(0.045);
    expect(Math.abs(day!.latency_p95_ms! / 1050 - 1)).toBeLessThan(0.045);
    const hours = usageByBucket(db, { fromUs: 0, toUs: 48 * hour, bucket: 'hour' });
    expect(hours.map((row) => row.calls)).toEqual([500, 500]);
    expect(hours[0]!.bucket).toBe('1970-01-01T10:00:00.000Z');
    db.close();
  });
});
