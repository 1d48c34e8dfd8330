import { describe, expect, it, onTestFinished } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { receiver, until, verify } from './receivers.js';

describe('webhook', () => {
  it('POSTs a signed batch, retrying with exponential backoff after two failures', async () => {
    const { url, requests } = await receiver([500, 503]);
    const secret = 'a-shared-secret';
    const context = tempTraceContext();
    const loaded = await loadPlugins(
      [
        [
          'webhook',
          {
            url,
            secret,
            batch_size: 3,
            initial_backoff_ms: 50,
            event_types: ['turn.started'],
            headers: { 'x-tenant': 't1' },
          },
        ],
      ],
      { configPath: null },
    );
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: silentLogger(),
      dataDir: tempDir(),
    });
    onTestFinished(() => host.stop());

    const emitted = [1, 2, 3].map((n) => context.bus.emit(turnStarted('sess_a', null, `turn_${n}`))!);
    await context.flush();
    await until(() => host.list()[0]!.stats!.sent === 3);

    // The same delivery three times: same body, same signature, same delivery id.
    expect(new Set(requests.map((r) => r.body)).size).toBe(1);
    expect(new Set(requests.map((r) => r.headers['x-metis-delivery'])).size).toBe(1);
    for (const request of requests) {
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['x-tenant']).toBe('t1');
      expect(request.headers['x-metis-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(verify(secret, request)).toBe(true);
      expect(verify('another-secret', request)).toBe(false);
    }
    const body = JSON.parse(requests[0]!.body);
    expect(body.events.map((e: { id: string }) => e.id)).toEqual(emitted.map((e) => e.id));
    expect(body.delivery_id).toBe(requests[0]!.headers['x-metis-delivery']);
    // Backoff doubles: ~50 ms, then ~100 ms.
    const first = requests[1]!.at - requests[0]!.at;
    const second = requests[2]!.at - requests[1]!.at;
    expect(first).toBeGreaterThanOrEqual(45);
    expect(second).toBeGreaterThanOrEqual(95);
    expect(host.list()[0]).toMatchObject({
      fast_path: true,
      delivered: 3,
      failed: 0,
      dropped: 0,
      stats: { sent: 3, retries: 2, batches: 1, failed: 0, dropped: 0, buffered: 0 },
    });
  });

  it('never blocks: a full buffer drops new events, counted and logged; a dead receiver fails them', async () => {
    const { url } = await receiver([500, 500, 500, 500]);
    const context = tempTraceContext();
    const logs = captureLogs('warn');
    const loaded = await loadPlugins(
      [
        [
          'webhook',
          {
            url,
            secret: 's',
            batch_size: 100,
            max_buffer: 4,
            max_retries: 1,
            initial_backoff_ms: 20,
            flush_interval_ms: 50,
            event_types: ['turn.started'],
          },
        ],
      ],
      { configPath: null },
    );
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: logs.logger,
      dataDir: tempDir(),
    });
    onTestFinished(() => host.stop());

    for (let n = 0; n < 10; n += 1) context.bus.emit(turnStarted('sess_a', null, `turn_${n}`));
    await context.flush();
    expect(host.list()[0]).toMatchObject({ delivered: 10, dropped: 6, stats: { buffered: 4, dropped: 6 } });
    await until(() => host.list()[0]!.stats!.failed === 4);
    expect(host.list()[0]).toMatchObject({ failed: 4, dropped: 6, stats: { sent: 0, retries: 1 } });
    await settleLogs();
    const messages = logs.at(LEVEL.warn).map((r) => r.msg);
    expect(messages).toContain('webhook buffer full; dropping events');
    expect(messages).toContain('webhook delivery gave up');
  });
});
