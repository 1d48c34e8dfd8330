import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { sessionCreated, turnStarted } from '../helpers/events.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { FIXTURES, pluginProject, startProjectPlugins } from './plugin-harness.js';

describe('plugin failure modes: one fixture each', () => {
  it('a plugin that throws in handle is isolated: emit, other subscribers and the store are unaffected', async () => {
    const { dir, configPath } = pluginProject(['throws.mjs', 'collector.mjs'], {
      plugins: ['./throws.mjs', ['./collector.mjs', { out: 'seen.jsonl' }]],
    });
    const logs = captureLogs('warn');
    const context = tempTraceContext({ logger: logs.logger });
    const host = await startProjectPlugins(configPath, context, logs.logger);
    const direct: MetisEvent[] = [];
    context.bus.subscribe({
      name: 'direct',
      fastPath: true,
      filter: { session_ids: ['sess_a'] },
      handler: (e) => void direct.push(e),
    });

    const emitted = [
      context.bus.emit(sessionCreated('sess_a'))!,
      context.bus.emit(turnStarted('sess_a'))!,
      context.bus.emit(turnStarted('sess_a', null, 'turn_2'))!,
    ];
    await context.flush();

    expect(emitted.every((e) => e !== null)).toBe(true);
    const ids = emitted.map((e) => e.id);
    expect(direct.map((e) => e.id)).toEqual(ids);
    expect(ids.every((id) => context.store.getEvent(id) !== null)).toBe(true);
    // Both plugins get every event, the bus's own subscriber announcements included.
    const [thrower, collector] = host.list();
    const total = collector!.delivered;
    expect(total).toBeGreaterThanOrEqual(3);
    expect(thrower).toMatchObject({ name: 'throws', delivered: 0, failed: total, dropped: 0 });
    expect(collector).toMatchObject({ name: 'collector', failed: 0, dropped: 0, stats: { seen: total } });
    const seen = readFileSync(join(dir, 'seen.jsonl'), 'utf8');
    for (const id of ids) expect(seen).toContain(id);
    await settleLogs();
    const warnings = logs.at(LEVEL.warn).filter((r) => r.subscription === 'plugin:throws');
    expect(warnings).toHaveLength(total);
    expect(warnings.map((w) => (w.err as { message: string }).message)).toContain(
      'cannot handle turn.started',
    );
    expect(warnings[0]).toMatchObject({ msg: 'event handler failed' });
  });

  it('a wrong export stops startup with a coded error naming the plugin, the config file and the problem', async () => {
    const { configPath } = pluginProject(['wrong-export.mjs'], { plugins: ['./wrong-export.mjs'] });
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_EXPORT',
      exitCode: 2,
      message: `plugin "./wrong-export.mjs" (plugins[0] in ${configPath}): the default export's "create" must be a function, got undefined`,
    });

    const dir = tempDir();
    const cases: [string, string][] = [
      [
        'export const create = () => ({});',
        'the module has no default export (it exports create); default-export { name, create }',
      ],
      ['export default () => ({});', 'the default export is a function; export an object instead'],
      [
        'export default { create() {} };',
        `the default export's "name" must be a non-empty string, got undefined`,
      ],
      [
        'export default { name: "x", optionsSchema: {}, create() {} };',
        `the default export's "optionsSchema" must have a safeParse(value) method`,
      ],
      [
        'export default { name: "x", create() { return { filter: {} }; } };',
        'create() must return { handle(event)',
      ],
      [
        'export default { name: "x", create() { return { handle() {}, filter: { event_types: ["turn.strated"] } }; } };',
        'filter.event_types has an unknown value "turn.strated"',
      ],
    ];
    for (const [source, problem] of cases) {
      const file = join(dir, `case-${cases.findIndex((c) => c[0] === source)}.mjs`);
      writeFileSync(file, source);
      const attempt = loadPlugins([file], { configPath: join(dir, 'metis.config.json') }).then((loaded) =>
        startPlugins(loaded, {
          bus: tempTraceContext().bus,
          store: tempTraceContext().store,
          logger: captureLogs().logger,
          dataDir: dir,
        }),
      );
      await expect(attempt, source).rejects.toMatchObject({ code: 'METIS_ERR_PLUGIN_EXPORT' });
      await expect(attempt, source).rejects.toThrow(problem);
    }
  });

  it('a missing module is METIS_ERR_PLUGIN_NOT_FOUND with the path it looked at', async () => {
    const { dir, configPath } = pluginProject([], {
      plugins: ['jsonl-sink', './nowhere.mjs', 'no-such-metis-plugin'],
    });
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_NOT_FOUND',
      message: `plugin "./nowhere.mjs" (plugins[1] in ${configPath}): no file at ${join(dir, 'nowhere.mjs')}`,
    });
    const packaged = pluginProject([], { plugins: ['no-such-metis-plugin'] });
    await expect(startProjectPlugins(packaged.configPath, tempTraceContext())).rejects.toThrow(
      /plugins\[0\] .*: no installed package "no-such-metis-plugin"/,
    );
  });

  it('a handler marked slow() that asks for the fast path is refused at startup (bus §3.4)', async () => {
    const { configPath } = pluginProject(['slow-marked.mjs'], { plugins: ['./slow-marked.mjs'] });
    const context = tempTraceContext();
    await expect(startProjectPlugins(configPath, context)).rejects.toMatchObject({
      code: 'METIS_ERR_FAST_PATH_HANDLER',
      message: `plugin "./slow-marked.mjs" (plugins[0] in ${configPath}): its handle is marked slow() and cannot run on the fast path; return fastPath: false`,
    });
    expect(context.bus.subscriptions().map((s) => s.subscription.name)).toEqual(['trace-store-writer']);
  });

  it('a fast-path plugin that blocks is moved to its own mailbox: others get their events first', async () => {
    const order: string[] = [];
    const record = (who: string, id: string) => order.push(`${who}:${id}`);
    const context = tempTraceContext();
    const logs = captureLogs('warn');
    const loaded = await loadPlugins([[join(FIXTURES, 'blocking-fast.mjs'), { block_ms: 25, record }]], {
      configPath: null,
    });
    const host = await startPlugins(loaded, {
      bus: context.bus,
      store: context.store,
      logger: logs.logger,
      dataDir: tempDir(),
    });
    context.bus.subscribe({ name: 'other', fastPath: true, handler: (e) => void record('other', e.id) });

    const first = context.bus.emit(turnStarted('sess_a'))!;
    await context.flush();
    expect(host.list()[0]).toMatchObject({ fast_path: false, demoted: true, delivered: 1 });

    order.length = 0;
    const started = performance.now();
    const later = [1, 2, 3].map((n) => context.bus.emit(turnStarted('sess_a', null, `turn_${n + 1}`))!);
    // emit only enqueues: it never runs a handler, fast path or not.
    expect(performance.now() - started).toBeLessThan(20);
    await context.flush();
    await host.stop();

    const ids = later.map((e) => e.id);
    // Every event reached the other subscriber before the blocking plugin handled any of them.
    expect(order).toEqual([...ids.map((id) => `other:${id}`), ...ids.map((id) => `blocking-fast:${id}`)]);
    expect(host.list()[0]).toMatchObject({ delivered: 4, failed: 0, dropped: 0 });
    expect(first).not.toBeNull();
    await settleLogs();
    expect(logs.at(LEVEL.warn).map((r) => r.msg)).toContain(
      'fast-path plugin overran its budget; moved to a mailbox so it no longer delays dispatch',
    );
  });

  it('bad options stop startup with the path of the option and the problem', async () => {
    const { configPath } = pluginProject(['bad-options.mjs'], {
      plugins: [['./bad-options.mjs', { limits: { max: -1 } }]],
    });
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_OPTIONS',
      message: `plugin "./bad-options.mjs" (plugins[0] in ${configPath}): invalid options: options.limits.max: must be a positive number`,
    });

    const builtin = pluginProject([], {
      plugins: [['jsonl-sink', { max_files: 0, event_types: ['turn.strated'] }]],
    });
    await expect(startProjectPlugins(builtin.configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_OPTIONS',
      message:
        `plugin "jsonl-sink" (plugins[0] in ${builtin.configPath}): invalid options: ` +
        'options.max_files: Too small: expected number to be >=1; ' +
        'options.event_types.0: unknown event type "turn.strated" (run `metis catalog`)',
    });
    const webhook = pluginProject([], { plugins: [['webhook', { url: 'ftp://x' }]] });
    await expect(startProjectPlugins(webhook.configPath, tempTraceContext())).rejects.toThrow(
      /options\.url: .*; options\.secret: /,
    );
  });

  it('a plugin that throws in create or start stops startup and stops the plugins already started', async () => {
    const dir = tempDir();
    const file = join(dir, 'start-fails.mjs');
    writeFileSync(
      file,
      'export default { name: "start-fails", create() { return { handle() {}, start() { throw new Error("port in use"); } }; } };',
    );
    const { configPath } = pluginProject(['collector.mjs'], {
      plugins: [['./collector.mjs', { out: 'seen.jsonl' }], file],
    });
    const context = tempTraceContext();
    await expect(startProjectPlugins(configPath, context)).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_START',
      message: `plugin "${file}" (plugins[1] in ${configPath}): start() threw: port in use`,
    });
    await context.flush();
    // The collector was unsubscribed again (its stop() ran too).
    expect(context.bus.subscriptions().map((s) => s.subscription.name)).toEqual(['trace-store-writer']);
  });
});
