import { describe, expect, it } from 'vitest';
import type { ClientItem } from '../../src/client/client.js';
import { initialState, reduce } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';
import { emitPadded } from '../helpers/flood.js';
import { scrape } from '../helpers/prometheus.js';
import { subscribe, sync } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Issue 12: a client whose outbound queue passes half its bound gets one `lag_warning` frame per episode
 * (docs/decisions.md "lag_warning"), so it can shed load before the 1008 `client_too_slow` close.
 */

const MIB = 1024 * 1024;
const LIMIT = 200;
const CHUNK = 10;

async function queueDepth(t: TestServer): Promise<number> {
  return (await scrape(t.url)).value('metis_stream_queue_depth_events', { stat: 'max' })!;
}

/**
 * Emits padded events in chunks of CHUNK until the stalled client's outbound queue holds more than
 * `target` frames: the kernel's socket buffers take the first megabytes, the queue the rest.
 */
async function fillPast(
  t: TestServer,
  sessionId: string,
  target: number,
): Promise<{ depth: number; emitted: number }> {
  let depth = await queueDepth(t);
  let emitted = 0;
  for (let round = 0; depth <= target && round < 1000; round += 1) {
    await emitPadded(t, sessionId, CHUNK);
    emitted += CHUNK;
    depth = await queueDepth(t);
  }
  return { depth, emitted };
}

describe('lag_warning before eviction', () => {
  it('is sent once when the queue passes half its event bound, re-armed once it drains, and never closes the client', async () => {
    const t = await startTestServer(
      {},
      { stream: { maxQueueEvents: LIMIT, maxQueueBytes: 512 * MIB, socketHighWaterMark: 1024 } },
    );
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const socket = (client.ws as any)._socket;
    const warnings = () => client.frames.filter((f) => f.type === 'lag_warning');
    const warned = async () => (await scrape(t.url)).value('metis_stream_lag_warnings_total');

    // Episode 1: past half the bound, one warning; further growth (still under the bound) adds none.
    socket.pause();
    const half = await fillPast(t, sessionId, LIMIT / 2);
    expect(half.depth).toBeLessThanOrEqual(LIMIT / 2 + CHUNK);
    expect(await warned()).toBe(1);
    const more = await fillPast(t, sessionId, LIMIT * 0.8);
    expect(more.depth).toBeLessThanOrEqual(LIMIT);
    expect(await warned()).toBe(1);
    socket.resume();
    expect(await sync(client)).toBe(true); // everything queued has been read
    expect(warnings()).toHaveLength(1);
    const [first] = warnings();
    expect(Object.keys(first).sort()).toEqual([
      'limit_bytes',
      'limit_events',
      'queued_bytes',
      'queued_events',
      'type',
    ]);
    expect(first).toMatchObject({ type: 'lag_warning', limit_events: LIMIT, limit_bytes: 512 * MIB });
    expect(first.queued_events).toBeGreaterThan(LIMIT / 2);
    expect(first.queued_events).toBeLessThanOrEqual(LIMIT / 2 + CHUNK);
    expect(first.queued_bytes).toBeGreaterThan(first.queued_events * 32 * 1024);
    // The warning jumps the queue: the frames queued when it was sent arrive after it, not before.
    // Queued behind them, it would be followed only by what was emitted after it (≤ more + CHUNK).
    const after = client.frames.slice(client.frames.indexOf(first)).filter((f) => f.type === 'event');
    expect(after.length).toBeGreaterThanOrEqual(first.queued_events + more.emitted);
    expect(await queueDepth(t)).toBe(0);

    // Episode 2: the drain re-armed it.
    socket.pause();
    await fillPast(t, sessionId, LIMIT / 2);
    expect(await warned()).toBe(2);
    socket.resume();
    expect(await sync(client)).toBe(true);
    expect(warnings()).toHaveLength(2);
    expect(client.ws.readyState).toBe(client.ws.OPEN);
    expect((await scrape(t.url)).value('metis_stream_closes_total', { reason: 'client_too_slow' })).toBe(0);
  });

  it('passing half the byte bound warns too, far below the event bound', async () => {
    const maxQueueBytes = 4 * MIB;
    const t = await startTestServer(
      {},
      { stream: { maxQueueEvents: 1_000_000, maxQueueBytes, socketHighWaterMark: 1024 } },
    );
    const sessionId = await t.createSession();
    const { client } = await subscribe(t, sessionId);
    const socket = (client.ws as any)._socket;
    socket.pause();
    // Each padded frame is 32 KiB: half of 4 MiB is 64 frames, so 2 × CHUNK past it cannot overflow.
    for (let round = 0; round < 1000; round += 1) {
      await emitPadded(t, sessionId, CHUNK);
      if ((await scrape(t.url)).value('metis_stream_lag_warnings_total') === 1) break;
    }
    await emitPadded(t, sessionId, CHUNK);
    socket.resume();
    expect(await sync(client)).toBe(true);
    const warnings = client.frames.filter((f) => f.type === 'lag_warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0].queued_bytes).toBeGreaterThan(maxQueueBytes / 2);
    expect(warnings[0].queued_events).toBeLessThan(1000);
    expect(client.ws.readyState).toBe(client.ws.OPEN);
  });

  it("metis's own client library passes the frame through and its reducer and renderer ignore it (§9.2)", () => {
    const frame = {
      type: 'lag_warning',
      queued_events: 600,
      queued_bytes: 1024,
      limit_events: 1000,
      limit_bytes: 8 * MIB,
    };
    expect(reduce(initialState, frame)).toBe(initialState);
    const item: ClientItem = { kind: 'frame', frame };
    expect(renderItem(item, initialState, 'sess_x', { color: false })).toBe('');
  });
});
