import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type RunningService, startService } from '../../src/core/app/start-service.js';
import { loadConfig } from '../../src/core/config/load-config.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { silentLogger } from '../../src/core/logger.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * `metis serve` hands read_file its own secrets: the config file it loaded (named anything with
 * `--config`) and its database, even when both sit in the workspace; `runtime.secret_paths` adds more.
 * Turns are driven through the service's runtime (no HTTP), and confirmations answered from the bus.
 */

const API_KEY = 'sk-ant-api03-serve-secret-paths';

async function service(options: { conformance?: boolean } = {}) {
  const root = realpathSync(tempDir('metis-serve-secrets-'));
  const workspace = join(root, 'ws');
  mkdirSync(join(workspace, 'data'), { recursive: true });
  mkdirSync(join(workspace, 'private'));
  writeFileSync(join(workspace, 'notes.txt'), 'inside\n');
  writeFileSync(join(workspace, 'private', 'plan.txt'), 'private\n');
  writeFileSync(join(root, 'outside.txt'), 'outside\n');
  const configPath = join(workspace, 'team-settings.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      server: { port: 0 },
      runtime: {
        providers: { anthropic: { api_key: API_KEY } },
        secret_paths: ['private/*'],
        scripted: { token_delay_ms: 0, slow_token_delay_ms: 1, slow_tokens: 10 },
      },
    }),
  );
  const { config, filepath } = await loadConfig({ explicitPath: configPath });
  const dbPath = join(workspace, 'data', 'metis.db');
  const running = await startService(config, dbPath, silentLogger(), {
    configPath: filepath,
    tokenFile: join(workspace, 'data', 'token'),
    conformance: options.conformance ? { faults: [] } : undefined,
  });
  onTestFinished(() => running.stop());
  const sessionId = running.runtime.createSession({ workspacePath: workspace }).id;
  return { running, sessionId, workspace };
}

/** Runs `read: <path>`, denying any confirmation; resolves with the requests and the tool's end event. */
async function readDenying(running: RunningService, sessionId: string, path: string) {
  const seen: MetisEvent[] = [];
  const subscription = running.trace.bus.subscribe({
    name: `answer-${path}`,
    fastPath: true,
    filter: { event_types: ['tool.confirmation_requested', 'tool.completed', 'tool.failed'] },
    handler: (event) => {
      seen.push(event);
      if (event.type === 'tool.confirmation_requested') {
        running.runtime.confirm(sessionId, String(event.payload.confirmation_request_id), 'deny');
      }
    },
  });
  await running.runtime.submitTurn(sessionId, `read: ${path}`).done;
  await running.trace.flush();
  running.trace.bus.unsubscribe(subscription);
  const mine = seen.filter((e) => e.session_id === sessionId);
  return {
    asked: mine.filter((e) => e.type === 'tool.confirmation_requested'),
    end: mine.find((e) => e.type === 'tool.completed' || e.type === 'tool.failed')!,
  };
}

describe('metis serve: read_file and the server’s own files', () => {
  it('asks for the config it loaded, its database files and runtime.secret_paths; not for notes', async () => {
    const { running, sessionId, workspace } = await service();
    for (const path of ['team-settings.json', 'data/metis.db', 'data/metis.db-wal', 'private/plan.txt']) {
      const { asked, end } = await readDenying(running, sessionId, path);
      expect(asked, path).toHaveLength(1);
      expect(asked[0]!.payload.input_summary).toContain(join(workspace, path));
      expect(asked[0]!.payload.input_summary).toContain('may hold secrets');
      expect(end.payload.error_class).toBe('user_denied');
    }
    const notes = await readDenying(running, sessionId, 'notes.txt');
    expect(notes.asked).toEqual([]);
    expect(notes.end.type).toBe('tool.completed');
  }, 30_000);

  it('--conformance leaves reads outside the workspace asking, and secrets too', async () => {
    const { running, sessionId } = await service({ conformance: true });
    const outside = await readDenying(running, sessionId, '../outside.txt');
    expect(outside.asked).toHaveLength(1);
    expect(outside.asked[0]!.payload.input_summary).toContain('outside the workspace');
    const config = await readDenying(running, sessionId, 'team-settings.json');
    expect(config.asked).toHaveLength(1);
  }, 30_000);
});
