import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolvePluginSpecifier } from '../../src/plugins/resolve-plugin.js';
import { sessionCreated, turnCompleted, turnStarted } from '../helpers/events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { pluginProject, startProjectPlugins } from './plugin-harness.js';

function lines(path: string): any[] {
  return readFileSync(path, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
}

describe('a third-party plugin (plain .mjs default export, no metis import)', () => {
  it('is loaded by a path relative to the config file and receives matching events from a real bus', async () => {
    const { dir, configPath } = pluginProject(['collector.mjs'], {
      plugins: [['./collector.mjs', { out: 'seen.jsonl', event_types: ['turn.started', 'turn.completed'] }]],
    });
    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context);

    const [status] = host.list();
    expect(status).toMatchObject({
      name: 'collector',
      specifier: './collector.mjs',
      path: join(dir, 'collector.mjs'),
      index: 0,
      fast_path: false,
      filter: { session_ids: null, event_types: ['turn.completed', 'turn.started'], actors: null },
    });

    context.bus.emit(sessionCreated('sess_a'));
    const started = context.bus.emit(turnStarted('sess_a'))!;
    context.bus.emit(turnStarted('sess_b', null, 'turn_2'));
    await context.flush();

    const seen = lines(join(dir, 'seen.jsonl'));
    expect(seen.map((l) => l.type)).toEqual(['turn.started', 'turn.started']);
    expect(seen[0]).toEqual({ id: started.id, type: 'turn.started', stored: true });
    expect(host.list()[0]).toMatchObject({ delivered: 2, failed: 0, dropped: 0, stats: { seen: 2 } });

    await host.stop();
    expect(lines(join(dir, 'seen.jsonl')).at(-1)).toEqual({ stopped: true, seen: 2 });
  });

  it('gets its options checked by its own hand-written schema before it starts', async () => {
    const { configPath } = pluginProject(['collector.mjs'], { plugins: [['./collector.mjs', { out: 42 }]] });
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_OPTIONS',
      message: `plugin "./collector.mjs" (plugins[0] in ${configPath}): invalid options: options.out: must be a file name`,
    });
  });
});

/** A plugin package with no dependency on metis: it appends what it sees to a file in the config's folder. */
const DEMO_PLUGIN = `
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';

export default {
  name: 'demo',
  create(options, ctx) {
    const out = join(ctx.configDir, options.out ?? 'demo-seen.jsonl');
    let seen = 0;
    return {
      filter: { event_types: ['turn.started'] },
      handle(event) {
        seen += 1;
        appendFileSync(out, JSON.stringify({ id: event.id, type: event.type, plugin: ctx.name }) + '\\n');
      },
      stats: () => ({ seen }),
    };
  },
};
`;

/** Writes `node_modules/<name>/{package.json,index.js}` under `root`. */
function installPackage(root: string, name: string, exportsField: unknown): string {
  const dir = join(root, 'node_modules', ...name.split('/'));
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name, version: '1.0.0', type: 'module', exports: exportsField }, null, 2),
  );
  writeFileSync(join(dir, 'index.js'), DEMO_PLUGIN);
  return join(dir, 'index.js');
}

/** A project folder `root` with the config in `root/app/`, so packages are found from its folder upward. */
function packageProject(plugins: unknown[]): { root: string; appDir: string; configPath: string } {
  const root = tempDir('metis-pkg-');
  const appDir = join(root, 'app');
  mkdirSync(appDir);
  const configPath = join(appDir, 'metis.config.json');
  writeFileSync(configPath, JSON.stringify({ plugins }, null, 2));
  return { root, appDir, configPath };
}

describe('a third-party plugin named by package name', () => {
  it("is found in node_modules from the config file's folder and receives events from a real bus", async () => {
    const { root, appDir, configPath } = packageProject(['metis-plugin-demo']);
    const entry = installPackage(root, 'metis-plugin-demo', './index.js');
    // Not resolvable from where the tests run: only the config file's folder leads to it.
    expect(resolvePluginSpecifier('metis-plugin-demo', process.cwd()).kind).toBe('missing');

    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context);
    expect(host.list()).toEqual([
      expect.objectContaining({
        name: 'demo',
        specifier: 'metis-plugin-demo',
        path: entry,
        index: 0,
        fast_path: false,
        filter: { session_ids: null, event_types: ['turn.started'], actors: null },
      }),
    ]);

    context.bus.emit(sessionCreated('sess_pkg'));
    const started = context.bus.emit(turnStarted('sess_pkg'))!;
    context.bus.emit(turnCompleted('sess_pkg', started.id));
    await context.flush();

    expect(lines(join(appDir, 'demo-seen.jsonl'))).toEqual([
      { id: started.id, type: 'turn.started', plugin: 'demo' },
    ]);
    expect(host.list()[0]).toMatchObject({ delivered: 1, failed: 0, dropped: 0, stats: { seen: 1 } });
  });

  it('an ESM-only scoped package (an "import" condition only) is found too, with its options', async () => {
    const { root, appDir, configPath } = packageProject([
      ['@acme/metis-plugin-demo', { out: 'scoped.jsonl' }],
    ]);
    const entry = installPackage(root, '@acme/metis-plugin-demo', { '.': { import: './index.js' } });
    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context);
    expect(host.list()[0]).toMatchObject({ name: 'demo', specifier: '@acme/metis-plugin-demo', path: entry });
    const started = context.bus.emit(turnStarted('sess_scoped'))!;
    await context.flush();
    expect(lines(join(appDir, 'scoped.jsonl'))).toEqual([
      { id: started.id, type: 'turn.started', plugin: 'demo' },
    ]);
  });

  it('a package that is not installed fails with METIS_ERR_PLUGIN_NOT_FOUND naming it', async () => {
    const { root, appDir, configPath } = packageProject(['metis-plugin-absent']);
    installPackage(root, 'metis-plugin-demo', './index.js');
    await expect(startProjectPlugins(configPath, tempTraceContext())).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_NOT_FOUND',
      message:
        `plugin "metis-plugin-absent" (plugins[0] in ${configPath}): ` +
        `no installed package "metis-plugin-absent" (searched node_modules from ${appDir} upward)`,
    });
  });
});
