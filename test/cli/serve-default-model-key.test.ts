import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 29 obs. D: `metis serve` refusing a default model whose provider has no key said only "not
 * configured", while `metis doctor` names the variable to set. The refusal names it too.
 */
describe('metis serve with a default model whose provider has no key', () => {
  it('exits non-zero and names $ANTHROPIC_API_KEY, with how to set it', async () => {
    const home = tempDir();
    const result = await runCli(
      ['serve', '--model', 'anthropic:claude-x', '--port', '0', '--db', join(home, 'metis.db')],
      home,
      { ANTHROPIC_API_KEY: '' }, // set but empty counts as unset, whatever the runner's environment holds
    );
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(
      /error: default model "anthropic:claude-x" cannot serve turns \(not_configured\): .*\$ANTHROPIC_API_KEY is not set/,
    );
    expect(result.stderr).toMatch(/hint: export ANTHROPIC_API_KEY=… before metis serve/);
  }, 60_000);

  it('names the variable the config says the key comes from (api_key_env)', async () => {
    const home = tempDir();
    const configPath = join(home, 'metis.config.json');
    writeFileSync(
      configPath,
      JSON.stringify({ runtime: { providers: { anthropic: { api_key_env: 'TEAM_ANTHROPIC_KEY' } } } }),
    );
    const result = await runCli(
      [
        'serve',
        ...['--model', 'anthropic:claude-x', '--port', '0'],
        ...['--db', join(home, 'metis.db'), '--config', configPath],
      ],
      home,
      { ANTHROPIC_API_KEY: 'sk-not-the-one-configured', TEAM_ANTHROPIC_KEY: '' },
    );
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toContain('$TEAM_ANTHROPIC_KEY is not set');
    expect(result.stderr).toContain('export TEAM_ANTHROPIC_KEY=…');
  }, 60_000);
});
