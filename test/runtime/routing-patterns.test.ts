import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/core/config/load-config.js';
import { runtimeConfig } from '../../src/core/config/runtime-schema.js';
import { ModelRegistry } from '../../src/core/runtime/models/model-registry.js';
import { decideRoute } from '../../src/core/runtime/router.js';
import { tempDir } from '../helpers/tmp.js';

function configFile(rules: { name: string; match: string; model: string }[]): string {
  const path = join(tempDir(), 'metis.config.json');
  writeFileSync(path, JSON.stringify({ runtime: { routing_rules: rules } }));
  return path;
}

const route = (config: ReturnType<typeof runtimeConfig>, messageText: string) =>
  decideRoute(
    { messageText, overrideModel: null, stickyModel: null, workspacePath: '/w', delegateModel: null },
    config,
    new ModelRegistry(config),
  );

describe('routing rule patterns cannot block the server (issue 12, observation 6)', () => {
  it('a catastrophic pattern the linear-time engine cannot express is refused at config load, named', async () => {
    const path = configFile([
      { name: 'fine', match: 'refactor|rewrite', model: 'scripted:a' },
      { name: 'lookahead', match: '^(?=a)(a+)+$', model: 'scripted:b' },
    ]);
    const attempt = loadConfig({ explicitPath: path });
    await expect(attempt).rejects.toMatchObject({ code: 'METIS_ERR_CONFIG_INVALID' });
    await expect(attempt).rejects.toThrow(
      /runtime\.routing_rules\.1\.match: pattern "\^\(\?=a\)\(a\+\)\+\$" cannot be matched in linear time .*lookahead/,
    );
  });

  it('^(a+)+$ is accepted only because it runs in linear time: a 28-character message routes at once', () => {
    const config = runtimeConfig({
      routing_rules: [
        { name: 'nested', match: '^(a+)+$', model: 'scripted:nested' },
        { name: 'overlap', match: '(a|a)*$x', model: 'scripted:overlap' },
      ],
    });
    for (const length of [28, 30, 100_000]) {
      const decision = route(config, `${'a'.repeat(length - 1)}!`);
      expect(decision.chosen_model).toBe('scripted:demo');
      // V8's backtracking takes 0.7 s at 28 characters and doubles with each one more; RE2 takes about
      // a millisecond. A bound this generous only fails when matching backtracks.
      expect(decision.elapsed_ms, `${length} characters`).toBeLessThan(1000);
    }
    expect(route(config, 'aaaa').chosen_model).toBe('scripted:nested');
  });

  it('normal rules keep their JavaScript meaning: case-insensitive, unanchored, named groups, \\u escapes', () => {
    const config = runtimeConfig({
      routing_rules: [
        { name: 'cjk', match: '[\\u4e00-\\u9fff]', model: 'scripted:cjk' },
        { name: 'verbs', match: '\\b(?<verb>deploy|release)\\b', model: 'scripted:ops' },
      ],
    });
    expect(route(config, 'please RELEASE it').chosen_model).toBe('scripted:ops');
    expect(route(config, 'releases').chosen_model).toBe('scripted:demo');
    expect(route(config, '请总结').chosen_model).toBe('scripted:cjk');
    expect(() => runtimeConfig({ routing_rules: [{ name: 'x', match: '(', model: 'scripted:x' }] })).toThrow(
      /is not a valid regular expression/,
    );
    expect(() =>
      runtimeConfig({ routing_rules: [{ name: 'x', match: '(\\w)\\1', model: 'scripted:x' }] }),
    ).toThrow(/cannot be matched in linear time/);
  });
});
