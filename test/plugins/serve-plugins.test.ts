import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startService } from '../../src/core/app/start-service.js';
import { loadConfig } from '../../src/core/config/load-config.js';
import { silentLogger } from '../../src/core/logger.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';
import { pluginProject } from './plugin-harness.js';
import { otlpReceiver, receiver, until, verify } from './receivers.js';

async function json(url: string, init?: RequestInit & { token?: string | null }): Promise<any> {
  const response = await fetch(url, {
    ...init,
    headers: {
      ...(init?.body ? { 'content-type': 'application/json' } : {}),
      ...(init?.token ? { authorization: `Bearer ${init.token}` } : {}),
    },
  });
  return response.json();
}

describe('metis serve with plugins', () => {
  it('runs the three built-ins and a local plugin, lists them at GET /plugins and stops them', async () => {
    const hook = await receiver([]);
    const otlp = await otlpReceiver();
    const { dir, configPath } = pluginProject(['collector.mjs'], {
      server: { port: 0 },
      runtime: { scripted: { token_delay_ms: 0, slow_token_delay_ms: 1, slow_tokens: 10 } },
      plugins: [
        [
          'jsonl-sink',
          { path: 'trace.jsonl', event_types: ['turn.started', 'turn.completed', 'tool.called'] },
        ],
        [
          'webhook',
          { url: hook.url, secret: 'hook-secret', event_types: ['turn.completed'], flush_interval_ms: 50 },
        ],
        ['otel', { endpoint: otlp.endpoint, scheduled_delay_ms: 50 }],
        ['./collector.mjs', { out: 'collected.jsonl', event_types: ['tool.completed'] }],
      ],
    });
    const { config, filepath } = await loadConfig({ explicitPath: configPath });
    // The token file in the project folder, which `metis plugins` below runs in as its METIS_HOME.
    const service = await startService(config, join(tempDir(), 'metis.db'), silentLogger(), {
      configPath: filepath,
      tokenFile: join(dir, 'token'),
    });
    const token = service.auth.token;
    onTestFinished(() => service.stop());

    const turnDone = new Promise<void>((resolve) => {
      service.trace.writer.onCommit((batch) => {
        if (batch.some((e) => e.type === 'turn.completed')) resolve();
      });
    });
    const { session_id: sessionId } = await json(`${service.url}/sessions`, {
      method: 'POST',
      body: JSON.stringify({ workspace_path: dir }),
      token,
    });
    await json(`${service.url}/sessions/${sessionId}/turns`, {
      method: 'POST',
      body: JSON.stringify({ message: 'time' }),
      token,
    });
    await turnDone;
    await service.trace.flush();

    const { plugins } = await json(`${service.url}/plugins`, { token });
    expect(plugins.map((p: any) => [p.name, p.path, p.fast_path])).toEqual([
      ['jsonl-sink', 'builtin:jsonl-sink', false],
      ['webhook', 'builtin:webhook', true],
      ['otel', 'builtin:otel', false],
      ['collector', join(dir, 'collector.mjs'), false],
    ]);
    expect(plugins[0]).toMatchObject({
      delivered: 3,
      failed: 0,
      dropped: 0,
      filter: { event_types: ['tool.called', 'turn.completed', 'turn.started'] },
    });
    expect(plugins[3]).toMatchObject({ delivered: 1, failed: 0, dropped: 0 });

    const listed = await runCli(['plugins', '--json', '--config', configPath, '--url', service.url], dir);
    expect(listed.stderr).toBe('');
    const fromServer = JSON.parse(listed.stdout);
    expect(fromServer).toMatchObject({ source: 'server', url: service.url });
    expect(fromServer.plugins.map((p: any) => p.name)).toEqual([
      'jsonl-sink',
      'webhook',
      'otel',
      'collector',
    ]);
    expect(fromServer.plugins[0].delivered).toBe(3);

    await until(() => hook.requests.length > 0);
    await service.stop();

    const lines = readFileSync(join(dir, 'trace.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((e) => e.type)).toEqual(['turn.started', 'tool.called', 'turn.completed']);
    expect(verify('hook-secret', hook.requests[0]!)).toBe(true);
    expect(JSON.parse(hook.requests[0]!.body).events[0]).toMatchObject({
      type: 'turn.completed',
      session_id: sessionId,
    });
    const names = otlp.spans.map((s) => s.name);
    expect(names).toContain('invoke_agent metis');
    expect(names).toContain('execute_tool current_time');
    expect(names.filter((n) => n.startsWith('chat '))).toHaveLength(2);
    const collected = readFileSync(join(dir, 'collected.jsonl'), 'utf8');
    expect(collected).toContain('"type":"tool.completed"');
    expect(collected).toContain('"stopped":true');
  }, 30_000);

  it('a bad plugin stops startup before the server listens and releases the database', async () => {
    const { dir, configPath } = pluginProject(['wrong-export.mjs'], {
      server: { port: 0 },
      plugins: ['./wrong-export.mjs'],
    });
    const { config, filepath } = await loadConfig({ explicitPath: configPath });
    const dbPath = join(tempDir(), 'metis.db');
    await expect(
      startService(config, dbPath, silentLogger(), { configPath: filepath, tokenFile: join(dir, 'token') }),
    ).rejects.toMatchObject({
      code: 'METIS_ERR_PLUGIN_EXPORT',
    });
    expect(existsSync(dbPath)).toBe(true);
    // The lock was released: the same database opens again.
    const again = await startService({ ...config, plugins: [] }, dbPath, silentLogger(), {
      tokenFile: join(dir, 'token'),
    });
    await again.stop();
  });
});
