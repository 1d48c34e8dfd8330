import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

describe('metis gateway: the key commands', () => {
  it('explains every flag, and names the field of bad input with a non-zero exit', async () => {
    const home = tempDir('metis-gw-cli-');
    const help = await runCli(['gateway', 'issue-key', '--help'], home);
    for (const flag of [
      '--name',
      '--models',
      '--daily-usd',
      '--monthly-usd',
      '--user',
      '--team',
      '--keystore',
      '--json',
    ])
      expect(help.stdout).toContain(flag);
    const rotateHelp = await runCli(['gateway', 'rotate-key', '--help'], home);
    expect(rotateHelp.stdout).toContain('--grace');
    const badCap = await runCli(['gateway', 'issue-key', '--name', 'x', '--daily-usd', '-5'], home);
    expect(badCap.exitCode).toBe(2);
    expect(badCap.stderr).toContain('--daily-usd');
    const badModels = await runCli(
      ['gateway', 'issue-key', '--name', 'x', '--models', 'gpt-4o', '--json'],
      home,
    );
    expect(badModels.exitCode).toBe(2);
    expect(JSON.parse(badModels.stderr).error.message).toContain('--models');
    const badId = await runCli(['gateway', 'revoke-key', 'nope'], home);
    expect(badId.exitCode).toBe(2);
    expect(badId.stderr).toContain('key_id');
  });

  it('beside a running metis serve: keys take effect without a restart, and all six gateway and quota types reach metis export', async () => {
    const home = tempDir('metis-gw-cli-');
    const config = join(home, 'metis.config.json');
    // $1 an output token: "hi" → "You said: hi" costs $3.
    writeFileSync(
      config,
      JSON.stringify({
        server: { auth: 'none' },
        runtime: { pricing: { 'scripted:*': { input_per_mtok: 0, output_per_mtok: 1_000_000 } } },
      }),
    );
    const withConfig = ['--config', config];
    const server = await serveCli(home, withConfig);
    const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };
    const client = (secret: string) =>
      new OpenAI({ apiKey: secret, baseURL: `${server.url}/v1`, maxRetries: 0 });

    const issued = await runCli(
      [
        'gateway',
        'issue-key',
        '--name',
        'e2e app',
        '--daily-usd',
        '5',
        '--user',
        'usr_e2e',
        '--json',
        ...withConfig,
      ],
      home,
    );
    expect(issued.exitCode, issued.stderr).toBe(0);
    const { key, secret } = JSON.parse(issued.stdout);
    expect(secret).toMatch(/^mgw_/);
    const keystore = join(home, 'gateway-keys.json');
    expect(statSync(keystore).mode & 0o777).toBe(0o600);
    expect(readFileSync(keystore, 'utf8')).not.toContain(secret);

    expect((await client(secret).chat.completions.create(ask)).choices[0]!.message.content).toBe(
      'You said: hi',
    );
    await client(secret).chat.completions.create(ask); // $6 of $5: quota.alert at 80 and 100
    expect(
      await client(secret)
        .chat.completions.create(ask)
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.RateLimitError);
    expect(
      await client('mgw_wrong')
        .chat.completions.create(ask)
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.AuthenticationError);

    const rotated = await runCli(
      ['gateway', 'rotate-key', key.id, '--grace', '0', '--json', ...withConfig],
      home,
    );
    expect(rotated.exitCode, rotated.stderr).toBe(0);
    const successor = JSON.parse(rotated.stdout);
    expect(
      await client(secret)
        .chat.completions.create(ask)
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.AuthenticationError);
    const revoked = await runCli(['gateway', 'revoke-key', successor.key.id, ...withConfig], home);
    expect(revoked.exitCode, revoked.stderr).toBe(0);
    expect(
      await client(successor.secret)
        .chat.completions.create(ask)
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.AuthenticationError);
    const listed = JSON.parse((await runCli(['gateway', 'list-keys', '--json', ...withConfig], home)).stdout);
    expect(listed.map((k: any) => [k.id, k.status])).toEqual([
      [key.id, 'revoked'],
      [successor.key.id, 'revoked'],
    ]);
    expect(JSON.stringify(listed)).not.toContain('secret_sha256');

    await server.stop('SIGTERM');
    const exported = await runCli(
      [
        'export',
        '--type',
        'gateway.key_issued,gateway.key_rotated,gateway.key_revoked,gateway.auth_failed,gateway.quota_exceeded,quota.alert,llm.call_completed',
        ...withConfig,
      ],
      home,
    );
    expect(exported.exitCode, exported.stderr).toBe(0);
    const events = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    const types = new Set(events.map((e) => e.type));
    for (const type of [
      'gateway.key_issued',
      'gateway.key_rotated',
      'gateway.key_revoked',
      'gateway.auth_failed',
      'gateway.quota_exceeded',
      'quota.alert',
    ])
      expect(types, type).toContain(type);
    const admin = events.filter((e) => e.type.startsWith('gateway.key_'));
    expect(new Set(admin.map((e) => e.session_id))).toEqual(new Set(['system']));
    // grace_period_expired: the rotated key's lapse, persisted by the next admin command.
    expect(
      admin
        .filter((e) => e.type === 'gateway.key_revoked')
        .map((e) => e.payload.reason)
        .sort(),
    ).toEqual(['admin_revoke', 'grace_period_expired']);
    expect(
      events.filter((e) => e.type === 'llm.call_completed').map((e) => e.payload.gateway_key_id),
    ).toEqual([key.id, key.id]);
    expect(exported.stdout).not.toContain(secret);
  });
});
