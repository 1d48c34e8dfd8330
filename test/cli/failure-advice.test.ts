import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** `metis send --new <message> --follow` against a server with `config`, its output and exit code. */
async function followNew(
  message: string,
  config: Parameters<typeof startTestServer>[0] = {},
  extra: string[] = [],
) {
  const t = await startTestServer(config);
  return runCli(['send', '--new', message, '--follow', '--url', t.url, ...extra], tempDir());
}

describe('failures that explain themselves (issue 17 obs. 5)', () => {
  it('a turn whose model call failed ends "turn failed (class)" with advice, and no empty assistant line', async () => {
    const result = await followNew('fail: rate_limit');
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toContain('model call failed (rate_limit)');
    expect(result.stdout).toContain('■ turn failed (rate_limit)');
    expect(result.stdout).toContain('the provider is rate limiting: wait and send again');
    expect(result.stdout).not.toContain('■ turn done');
    expect(result.stdout).not.toMatch(/^assistant: *$/m);
  }, 30_000);

  it('an unreachable OpenAI-compatible server is named by its URL', async () => {
    const result = await followNew(
      'hello',
      {
        providers: {
          local: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', max_retries: 0 },
        },
      },
      ['--model', 'local:llama'],
    );
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toMatch(/model call failed \(network\): .*\(calling http:\/\/127\.0\.0\.1:9\/v1\)/);
    expect(result.stdout).toContain('■ turn failed (network)');
  }, 30_000);

  it('a model whose provider has no key says which variable is unset', async () => {
    const result = await followNew(
      'hello',
      { providers: { other: { kind: 'openai-compatible', api_key_env: 'METIS_TEST_UNSET_KEY' } } },
      ['--model', 'other:some-model'],
    );
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain(
      'other:some-model rejected (not_configured: no API key: $METIS_TEST_UNSET_KEY is not set)',
    );
  }, 30_000);
});
