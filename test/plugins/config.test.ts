import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { redactSecrets } from '../../src/commands/config-show.js';
import { loadConfig } from '../../src/core/config/load-config.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';
import { pluginProject } from './plugin-harness.js';

describe('configuration', () => {
  it('an invalid file stops with the file, the path inside it and the problem', async () => {
    const dir = tempDir();
    const file = join(dir, '.metisrc.yaml');
    writeFileSync(file, 'server:\n  port: 70000\nplugins:\n  - ["webhook"]\n  - 42\n');
    await expect(loadConfig({ cwd: dir })).rejects.toMatchObject({
      code: 'METIS_ERR_CONFIG_INVALID',
      message:
        `invalid config in ${file}: server.port: Too big: expected number to be <=65535; ` +
        'plugins.0: must be a plugin name or path, or [name, { options }]; ' +
        'plugins.1: must be a plugin name or path, or [name, { options }]',
    });
    const unknown = join(dir, 'unknown.json');
    writeFileSync(unknown, JSON.stringify({ storage: { retention: 3 } }));
    await expect(loadConfig({ explicitPath: unknown })).rejects.toThrow(
      `invalid config in ${unknown}: storage: Unrecognized key: "retention"`,
    );
  });

  it('a partial runtime.tool_confirmation or worker_tiers merges over the per-field defaults', async () => {
    const dir = tempDir();
    const file = join(dir, 'metis.config.json');
    writeFileSync(
      file,
      JSON.stringify({
        runtime: { tool_confirmation: { execute: 'allow' }, worker_tiers: { deep: 'anthropic:claude-x' } },
      }),
    );
    const { config } = await loadConfig({ explicitPath: file });
    expect(config.runtime.tool_confirmation).toEqual({ write: 'ask', execute: 'allow', network: 'ask' });
    expect(config.runtime.worker_tiers).toEqual({
      fast: 'scripted:fast',
      balanced: 'scripted:balanced',
      deep: 'anthropic:claude-x',
    });
    // An empty object and no object at all resolve to the same defaults.
    const defaults = MetisConfigSchema.parse({}).runtime;
    expect(MetisConfigSchema.parse({ runtime: { tool_confirmation: {}, worker_tiers: {} } }).runtime).toEqual(
      defaults,
    );
    expect(defaults.tool_confirmation).toEqual({ write: 'ask', execute: 'ask', network: 'ask' });

    // Still strict: an unknown key inside is an error naming its path, and so is a wrong value.
    writeFileSync(
      file,
      JSON.stringify({ runtime: { tool_confirmation: { execute: 'allow', exec: 'deny' } } }),
    );
    await expect(loadConfig({ explicitPath: file })).rejects.toMatchObject({
      code: 'METIS_ERR_CONFIG_INVALID',
      message: `invalid config in ${file}: runtime.tool_confirmation: Unrecognized key: "exec"`,
    });
    writeFileSync(file, JSON.stringify({ runtime: { worker_tiers: { fast: 'no-colon' } } }));
    await expect(loadConfig({ explicitPath: file })).rejects.toThrow(
      `invalid config in ${file}: runtime.worker_tiers.fast: must be "provider:name", e.g. scripted:demo`,
    );
  });

  it('redacts bearer_token, api_key, secrets and auth headers, keeping null as "not set"', () => {
    const config = MetisConfigSchema.parse({
      server: { bearer_token: 'a-very-long-bearer-token' },
      runtime: {
        providers: { ollama: { kind: 'openai-compatible', api_key: 'sk-1', api_key_env: 'OLLAMA_KEY' } },
      },
      plugins: [
        [
          'webhook',
          { url: 'http://x', secret: 'shh', headers: { Authorization: 'Bearer t', 'x-api-key': 'k' } },
        ],
      ],
    });
    const shown = redactSecrets(config) as any;
    expect(shown.server.bearer_token).toBe('[redacted]');
    expect(shown.runtime.providers.ollama).toMatchObject({
      api_key: '[redacted]',
      api_key_env: 'OLLAMA_KEY',
    });
    expect(shown.plugins[0][1]).toEqual({
      url: 'http://x',
      secret: '[redacted]',
      headers: { Authorization: '[redacted]', 'x-api-key': '[redacted]' },
    });
    expect(shown.runtime.scripted.slow_tokens).toBe(400);
    expect((redactSecrets(MetisConfigSchema.parse({})) as any).server.bearer_token).toBeNull();
  });

  it('`metis config show --json` prints the resolved config and its file, secrets redacted', async () => {
    const { dir, configPath } = pluginProject([], {
      server: { port: 9999, bearer_token: 'a-very-long-bearer-token' },
      storage: { database: 'data/metis.db' },
      plugins: ['jsonl-sink', ['webhook', { url: 'http://127.0.0.1:1/hook', secret: 'top-secret-value' }]],
    });
    const result = await runCli(['config', 'show', '--json', '--config', configPath], dir);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const shown = JSON.parse(result.stdout);
    expect(shown.file).toBe(configPath);
    expect(shown.config.server).toMatchObject({ host: '127.0.0.1', port: 9999, bearer_token: '[redacted]' });
    expect(shown.config.storage).toEqual({
      database: join(dir, 'data/metis.db'),
      retention_days: 90,
      synchronous: 'NORMAL',
    });
    expect(shown.config.bus).toEqual({ validation: null, queue_limit: 10_000 });
    expect(shown.config.plugins[1]).toEqual([
      'webhook',
      { url: 'http://127.0.0.1:1/hook', secret: '[redacted]' },
    ]);
    expect(result.stdout).not.toContain('top-secret-value');
    expect(result.stdout).not.toContain('a-very-long-bearer-token');

    const text = await runCli(['config', 'show', '--config', configPath], dir);
    expect(text.stdout).toContain(`# from ${configPath}`);
    expect(text.stdout).toMatch(/^server\.port = 9999$/m);
    expect(text.stdout).toMatch(/^server\.bearer_token = "\[redacted\]"$/m);

    const none = await runCli(['config', 'show', '--json'], tempDir());
    expect(JSON.parse(none.stdout)).toMatchObject({
      file: null,
      config: { server: { port: 8421 }, plugins: [] },
    });
  }, 60_000);

  it('`metis config show` on an invalid file exits 2 naming the file, the path and the problem', async () => {
    const { dir, configPath } = pluginProject([], { server: { port: 'eighty' } });
    const result = await runCli(['config', 'show', '--config', configPath], dir);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toMatch(
      new RegExp(
        `^error: invalid config in ${configPath}: server\\.port: Invalid input: expected number, received string$`,
        'm',
      ),
    );
  }, 30_000);

  it('`metis plugins` without a server lists what config names, checked as serve would', async () => {
    // The configured server (port 9) does not answer, so the listing comes from the config.
    const { dir, configPath } = pluginProject(['collector.mjs'], {
      server: { port: 9 },
      plugins: [['./collector.mjs', { out: 'x.jsonl', event_types: ['turn.completed'] }], 'otel'],
    });
    const result = await runCli(['plugins', '--json', '--config', configPath], dir);
    expect(result.stderr).toBe('');
    const listed = JSON.parse(result.stdout);
    expect(listed).toMatchObject({ source: 'config', config: configPath });
    expect(listed.plugins).toEqual([
      {
        name: 'collector',
        specifier: './collector.mjs',
        path: join(dir, 'collector.mjs'),
        index: 0,
        fast_path: false,
        filter: { session_ids: null, event_types: ['turn.completed'], actors: null },
      },
      expect.objectContaining({ name: 'otel', path: 'builtin:otel', fast_path: false }),
    ]);

    const broken = pluginProject(['wrong-export.mjs'], {
      server: { port: 9 },
      plugins: ['./wrong-export.mjs'],
    });
    const failed = await runCli(['plugins', '--config', broken.configPath], dir);
    expect(failed.exitCode).toBe(2);
    expect(failed.stderr).toMatch(
      /^error: plugin "\.\/wrong-export\.mjs" \(plugins\[0\] in .*\): the default export's "create"/m,
    );
  }, 60_000);
});
