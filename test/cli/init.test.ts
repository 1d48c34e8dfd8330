import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/core/config/load-config.js';
import { HAS_SCRIPT, KEY, metisInPty } from '../helpers/pty.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 17: `metis init` writes a commented config that metis itself accepts. */

describe('metis init', () => {
  it('with flags: a commented file that loads, with the provider, model, key variable and plugins asked for', async () => {
    const out = join(tempDir(), 'metis.config.yaml');
    const result = await runCli(
      [
        'init',
        '--yes',
        '--provider',
        'openai',
        '--model',
        'gpt-test',
        '--key-env',
        'MY_OPENAI_KEY',
        '--plugin',
        'jsonl-sink',
        '--out',
        out,
        '--json',
      ],
      tempDir(),
      { MY_OPENAI_KEY: '' },
    );
    expect(result.exitCode).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ path: out, provider: 'openai', key_env_set: false });
    const text = readFileSync(out, 'utf8');
    expect(text).toMatch(/^# metis configuration, written by `metis init`/);
    expect(text).toContain('docs/configuration.md');
    const { config } = await loadConfig({ explicitPath: out });
    expect(config.runtime.default_model).toBe('openai:gpt-test');
    expect(config.runtime.providers.openai).toMatchObject({ api_key_env: 'MY_OPENAI_KEY' });
    expect(config.plugins).toEqual(['jsonl-sink']);
    // `metis config show` reads it as metis serve would.
    const shown = await runCli(['config', 'show', '--config', out, '--json'], tempDir());
    expect(shown.exitCode).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({
      config: { runtime: { default_model: 'openai:gpt-test' } },
    });
  }, 30_000);

  it('ollama by default needs no key and points at the local server', async () => {
    const out = join(tempDir(), 'metis.config.yaml');
    const result = await runCli(['init', '--yes', '--provider', 'ollama', '--out', out], tempDir());
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain('next: metis doctor');
    const { config } = await loadConfig({ explicitPath: out });
    expect(config.runtime.default_model).toBe('ollama:llama3.2:3b');
    expect(config.runtime.providers.ollama).toMatchObject({
      kind: 'openai-compatible',
      base_url: 'http://localhost:11434/v1',
    });
    expect(config.runtime.providers.ollama!.api_key_env).toBeUndefined();
  }, 30_000);

  it('prices the model it proposes, so its costs are not 0; a model of your own gets an entry to fill in (issue 29)', async () => {
    for (const [provider, model] of [
      ['anthropic', 'anthropic:claude-sonnet-4-6'],
      ['openai', 'openai:gpt-4.1-mini'],
    ] as const) {
      const out = join(tempDir(), 'metis.config.yaml');
      const result = await runCli(['init', '--yes', '--provider', provider, '--out', out], tempDir());
      expect(result.exitCode, result.stderr).toBe(0);
      const { config } = await loadConfig({ explicitPath: out });
      expect(config.runtime.default_model).toBe(model);
      expect(config.runtime.pricing[model]!.input_per_mtok).toBeGreaterThan(0);
      expect(config.runtime.pricing[model]!.output_per_mtok).toBeGreaterThan(0);
      // The scripted models keep their price beside it.
      expect(config.runtime.pricing['scripted:*']).toMatchObject({ input_per_mtok: 1, output_per_mtok: 2 });
    }
    const out = join(tempDir(), 'metis.config.yaml');
    const own = await runCli(
      ['init', '--yes', '--provider', 'openai-compatible', '--model', 'qwen-x', '--out', out],
      tempDir(),
    );
    expect(own.exitCode, own.stderr).toBe(0);
    expect(readFileSync(out, 'utf8')).toContain(
      '  #   "local:qwen-x": { input_per_mtok: 0, output_per_mtok: 0 }',
    );
    expect((await loadConfig({ explicitPath: out })).config.runtime.default_model).toBe('local:qwen-x');
  }, 30_000);

  it('refuses to replace a file without --force (exit 1, file unchanged) and replaces it with it', async () => {
    const out = join(tempDir(), 'metis.config.yaml');
    writeFileSync(out, '# mine\n');
    const refused = await runCli(['init', '--yes', '--out', out], tempDir());
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain(`${out} already exists; pass --force`);
    expect(readFileSync(out, 'utf8')).toBe('# mine\n');
    const forced = await runCli(['init', '--yes', '--force', '--out', out], tempDir());
    expect(forced.exitCode).toBe(0);
    expect((await loadConfig({ explicitPath: out })).config.runtime.default_model).toBe('scripted:demo');
  }, 30_000);

  it('without a terminal and without --yes it fails at once naming the flags; bad input names the flag', async () => {
    const out = join(tempDir(), 'metis.config.yaml');
    const refused = await runCli(['init', '--out', out], tempDir());
    expect(refused.exitCode).toBe(2);
    expect(refused.stderr).toMatch(/--yes.*--provider/);
    expect(existsSync(out)).toBe(false);
    const badProvider = await runCli(['init', '--yes', '--provider', 'bard', '--out', out], tempDir());
    expect(badProvider.exitCode).toBe(2);
    expect(badProvider.stderr).toMatch(/--provider/);
    const badKey = await runCli(
      ['init', '--yes', '--provider', 'openai', '--key-env', 'NOT A VAR', '--out', out],
      tempDir(),
    );
    expect(badKey.exitCode).toBe(2);
    expect(badKey.stderr).toContain('--key-env');
    expect(existsSync(out)).toBe(false);
    const help = await runCli(['init', '--help'], tempDir());
    for (const flag of [
      '--provider',
      '--model',
      '--key-env',
      '--base-url',
      '--plugin',
      '--yes',
      '--force',
      '--out',
      '--json',
    ])
      expect(help.stdout).toContain(flag);
  }, 60_000);

  it.skipIf(!HAS_SCRIPT)(
    'on a terminal: chooses the provider with the arrow keys and takes the defaults',
    async () => {
      const out = join(tempDir(), 'metis.config.yaml');
      const init = metisInPty(['init', '--out', out], { ANTHROPIC_API_KEY: 'sk-test' });
      await init.waitFor('Which models will metis call?');
      init.type(KEY.down); // Anthropic
      init.type(KEY.enter);
      await init.waitFor('Model name');
      init.type(KEY.enter);
      await init.waitFor('holds the API key');
      init.type(KEY.enter);
      await init.waitFor('ANTHROPIC_API_KEY is set in this shell');
      await init.waitFor('Plugins');
      init.type(KEY.enter);
      expect(await init.exited).toBe(0);
      expect(init.screen()).toContain(`wrote ${out}`);
      const { config } = await loadConfig({ explicitPath: out });
      expect(config.runtime.default_model).toBe('anthropic:claude-sonnet-4-6');
      expect(config.runtime.providers.anthropic).toMatchObject({ api_key_env: 'ANTHROPIC_API_KEY' });
      expect(readFileSync(out, 'utf8')).not.toContain('sk-test');
    },
    60_000,
  );
});
