import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/core/config/load-config.js';
import { SYSTEM_SESSION_ID } from '../../src/core/events/envelope.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { type PluginTimeouts, startPlugins } from '../../src/plugins/plugin-host.js';
import { turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { eventually } from '../helpers/protocol.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { FIXTURES } from './plugin-harness.js';

/** Short bounds, so each case takes well under a second once fixed (and hangs for ever before). */
const SHORT: PluginTimeouts = { startMs: 300, handlerMs: 300, stopMs: 300 };
const CASE_TIMEOUT_MS = 15_000;

async function start(files: readonly (string | [string, Record<string, unknown>])[], timeouts = SHORT) {
  const context = tempTraceContext();
  const logs = captureLogs('warn');
  const entries = files.map((f) =>
    typeof f === 'string' ? join(FIXTURES, f) : [join(FIXTURES, f[0]), f[1]],
  );
  const loaded = await loadPlugins(entries as never, { configPath: null, loadTimeoutMs: 300 });
  const host = await startPlugins(loaded, {
    bus: context.bus,
    store: context.store,
    logger: logs.logger,
    dataDir: tempDir(),
    timeouts,
  });
  return { context, logs, host };
}

describe('bounded waits on plugin code (issue 12, observation 5)', () => {
  it(
    'a module whose top-level await never settles fails loading with the plugin and the bound named',
    async () => {
      const file = join(FIXTURES, 'hangs-import.mjs');
      const attempt = loadPlugins([file], { configPath: null, loadTimeoutMs: 300 });
      await expect(attempt).rejects.toMatchObject({ code: 'METIS_ERR_PLUGIN_START' });
      await expect(attempt).rejects.toThrow(
        `plugin "${file}" (plugins[0] in the built-in defaults): importing ${file} did not settle within 300 ms`,
      );
    },
    CASE_TIMEOUT_MS,
  );

  it(
    'a start() that never settles fails start-up, named, and stops the plugins already started',
    async () => {
      const context = tempTraceContext();
      const loaded = await loadPlugins(
        [
          [join(FIXTURES, 'collector.mjs'), { out: join(tempDir(), 'seen.jsonl') }],
          join(FIXTURES, 'hangs-start.mjs'),
        ],
        { configPath: null },
      );
      const attempt = startPlugins(loaded, {
        bus: context.bus,
        store: context.store,
        logger: captureLogs().logger,
        dataDir: tempDir(),
        timeouts: SHORT,
      });
      await expect(attempt).rejects.toMatchObject({
        code: 'METIS_ERR_PLUGIN_START',
        message: expect.stringMatching(
          /plugin ".*hangs-start\.mjs" \(plugins\[1\].*: start\(\) did not settle within 300 ms/,
        ),
      });
      expect(context.bus.subscriptions().map((s) => s.subscription.name)).toEqual(['trace-store-writer']);
    },
    CASE_TIMEOUT_MS,
  );

  it(
    'a handle() that never settles disables that plugin (removed_after_errors); the others carry on',
    async () => {
      const out = join(tempDir(), 'seen.jsonl');
      const { context, logs, host } = await start(['hangs-handle.mjs', ['collector.mjs', { out }]]);
      const emitted = [1, 2, 3].map((n) => context.bus.emit(turnStarted('sess_a', null, `turn_${n}`))!);

      expect(await eventually(() => host.list()[0]!.disabled !== null, 5000)).toBe(true);
      await context.flush();
      const [hung, collector] = host.list();
      expect(hung!.disabled).toMatch(/plugin "hangs-handle" handle\(\) did not settle within 300 ms/);
      expect(hung).toMatchObject({ failed: 1, delivered: 0, timeouts: 1 });
      expect(hung!.dropped).toBeGreaterThan(0);
      expect(collector).toMatchObject({ failed: 0, disabled: null, timeouts: 0 });
      expect(collector!.stats!.seen).toBeGreaterThanOrEqual(emitted.length);
      const subscribed = context.bus.subscriptions().map((s) => s.subscription.name);
      expect(subscribed).not.toContain('plugin:hangs-handle');
      const removed = context.store
        .sessionEvents(SYSTEM_SESSION_ID)
        .filter((e) => e.type === 'bus.subscriber_unregistered')
        .map((e) => e.payload);
      expect(removed).toContainEqual({
        subscription_name: 'plugin:hangs-handle',
        reason: 'removed_after_errors',
      });
      await settleLogs();
      expect(logs.at(LEVEL.error).map((r) => r.msg)).toContainEqual(
        expect.stringContaining(
          'plugin "hangs-handle" disabled: plugin "hangs-handle" handle() did not settle',
        ),
      );
      await host.stop();
    },
    CASE_TIMEOUT_MS,
  );

  it(
    'at shutdown a handler still running is abandoned: stop() returns within its bound, naming it',
    async () => {
      // A handler bound far beyond the test: only the shutdown path can end the wait.
      const out = join(tempDir(), 'handled.txt');
      const { context, logs, host } = await start([['hangs-handle.mjs', { out }]], {
        ...SHORT,
        handlerMs: 600_000,
      });
      context.bus.emit(turnStarted('sess_a'));
      // The handler is now inside its never-settling call (its first event is its own registration).
      expect(await eventually(() => existsSync(out))).toBe(true);
      await host.stop();
      await context.flush();
      await settleLogs();
      const warned = logs
        .at(LEVEL.warn)
        .find((r) => String(r.msg).includes('queued events not all delivered'));
      expect(warned?.plugins).toEqual(['hangs-handle']);
    },
    CASE_TIMEOUT_MS,
  );

  it(
    'a stop() that never settles is abandoned after stop_ms and named',
    async () => {
      const { logs, host } = await start(['hangs-stop.mjs']);
      await host.stop();
      await settleLogs();
      expect(logs.at(LEVEL.error).map((r) => r.msg)).toContain(
        'plugin "hangs-stop" stop() did not settle within 300 ms; abandoned',
      );
    },
    CASE_TIMEOUT_MS,
  );

  it(
    'a config file whose top-level await never settles is METIS_ERR_CONFIG_INVALID naming the file',
    async () => {
      const path = join(tempDir(), 'metis.config.mjs');
      writeFileSync(path, 'await new Promise(() => {});\nexport default {};\n');
      const attempt = loadConfig({ explicitPath: path, timeoutMs: 300 });
      await expect(attempt).rejects.toMatchObject({ code: 'METIS_ERR_CONFIG_INVALID' });
      await expect(attempt).rejects.toThrow(`loading ${path} did not finish within 300 ms`);
    },
    CASE_TIMEOUT_MS,
  );
});
