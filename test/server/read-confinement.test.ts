import { mkdirSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { subscribe, waitForType } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 13, observation 1: `read:` (the scripted model's `read_file` call) returned `/etc/passwd`,
 * `../outside.txt` and the config file with its `api_key`, never asking. Each case runs through a real
 * server with a real WebSocket client watching `tool.confirmation_requested`, and answers it over HTTP.
 */

const API_KEY = 'sk-ant-api03-confinement-test-key';

interface Layout {
  readonly root: string;
  readonly workspace: string;
  readonly outside: string;
}

/** `<root>/ws` is the workspace; `<root>/outside.txt` is next to it, outside. All real paths. */
function layout(): Layout {
  const root = realpathSync(tempDir('metis-confine-'));
  const workspace = join(root, 'ws');
  mkdirSync(workspace);
  const outside = join(root, 'outside.txt');
  writeFileSync(outside, 'outside content\n');
  writeFileSync(join(workspace, 'notes.txt'), 'inside content\n');
  writeFileSync(
    join(workspace, 'metis.config.json'),
    JSON.stringify({ runtime: { providers: { anthropic: { api_key: API_KEY } } } }),
  );
  writeFileSync(join(workspace, '.env'), `ANTHROPIC_API_KEY=${API_KEY}\n`);
  symlinkSync(outside, join(workspace, 'link-out.txt'));
  return { root, workspace, outside };
}

async function sessionIn(t: TestServer, workspace: string): Promise<string> {
  const created = await t.request('POST', '/sessions', { workspace_path: workspace });
  expect(created.status).toBe(201);
  return created.body.session_id;
}

type Answer = { decision: 'allow' | 'deny'; scope?: 'once' | 'session' };

/**
 * Runs `read: <path>` to the end of its turn, answering each confirmation with the next of `answers`.
 * Resolves with the confirmations seen, the tool call's end event and its stored row.
 */
async function readTurn(t: TestServer, sessionId: string, path: string, answers: Answer[] = []) {
  const { client } = await subscribe(t, sessionId, { snapshot: false });
  const turnId = await t.submit(sessionId, `read: ${path}`);
  const seen: any[] = [];
  for (const answer of answers) {
    const requested = await client.waitFor(
      (f) =>
        f.type === 'event' &&
        f.event.type === 'tool.confirmation_requested' &&
        f.event.turn_id === turnId &&
        !seen.includes(f.event),
    );
    seen.push(requested.event);
    const reply = await t.request(
      'POST',
      `/sessions/${sessionId}/confirmations/${requested.event.payload.confirmation_request_id}`,
      { decision: answer.decision, scope: answer.scope ?? 'once' },
    );
    expect(reply.status).toBe(200);
  }
  await client.waitFor(
    (f) =>
      f.type === 'event' && f.event.turn_id === turnId && /^turn\.(completed|failed)$/.test(f.event.type),
  );
  const events = client.events().filter((e) => e.turn_id === turnId);
  const confirmations = events.filter((e) => e.type === 'tool.confirmation_requested');
  const end = events.find((e) => e.type === 'tool.completed' || e.type === 'tool.failed')!;
  const row = t.runtime.sessions.toolCall(String(end.payload.tool_use_id), sessionId)!;
  client.close();
  return { confirmations, end, row };
}

async function server(config: RuntimeConfigInput = {}) {
  const t = await startTestServer(config);
  const l = layout();
  return { t, l, sessionId: await sessionIn(t, l.workspace) };
}

describe('read_file confinement through the server (issue 13, observation 1)', () => {
  it('read: /etc/passwd asks, naming the path and "outside the workspace"; allow returns it', async () => {
    const { t, l, sessionId } = await server();
    const { confirmations, end, row } = await readTurn(t, sessionId, '/etc/passwd', [{ decision: 'allow' }]);
    expect(confirmations).toHaveLength(1);
    expect(confirmations[0].payload).toMatchObject({
      tool_name: 'read_file',
      side_effects: 'read',
      projected_modifications: null,
      command_summary: null,
    });
    expect(confirmations[0].payload.input_summary).toContain(realpathSync('/etc/passwd'));
    expect(confirmations[0].payload.input_summary).toContain(`outside the workspace ${l.workspace}`);
    expect(end.type).toBe('tool.completed');
    expect(String(row.output)).toContain('root:');
  }, 30_000);

  it('read: ../outside.txt asks with the resolved path; deny gives user_denied and nothing is read', async () => {
    const { t, l, sessionId } = await server();
    const { confirmations, end, row } = await readTurn(t, sessionId, '../outside.txt', [
      { decision: 'deny' },
    ]);
    expect(confirmations).toHaveLength(1);
    expect(confirmations[0].payload.side_effects).toBe('read');
    expect(confirmations[0].payload.input_summary).toContain(l.outside);
    expect(confirmations[0].payload.input_summary).toContain('"../outside.txt"');
    expect(end.type).toBe('tool.failed');
    expect(end.payload.error_class).toBe('user_denied');
    expect(String(row.output)).not.toContain('outside content');
  }, 30_000);

  it('a symlink in the workspace to a file outside is outside: asks with the target path', async () => {
    const { t, l, sessionId } = await server();
    const { confirmations, end, row } = await readTurn(t, sessionId, 'link-out.txt', [{ decision: 'allow' }]);
    expect(confirmations).toHaveLength(1);
    expect(confirmations[0].payload.input_summary).toContain(l.outside);
    expect(confirmations[0].payload.input_summary).toContain('outside the workspace');
    expect(end.type).toBe('tool.completed');
    expect(row.output).toBe('outside content\n');
  }, 30_000);

  it('the config file holding api_key inside the workspace asks, as a file that may hold secrets', async () => {
    const { t, l, sessionId } = await server();
    const { confirmations, end, row } = await readTurn(t, sessionId, 'metis.config.json', [
      { decision: 'deny' },
    ]);
    expect(confirmations).toHaveLength(1);
    expect(confirmations[0].payload.side_effects).toBe('read');
    expect(confirmations[0].payload.input_summary).toContain(join(l.workspace, 'metis.config.json'));
    expect(confirmations[0].payload.input_summary).toContain('may hold secrets');
    expect(end.payload.error_class).toBe('user_denied');
    expect(String(row.output)).not.toContain(API_KEY);
  }, 30_000);

  it('.env inside the workspace asks', async () => {
    const { t, l, sessionId } = await server();
    const { confirmations, end } = await readTurn(t, sessionId, '.env', [{ decision: 'allow' }]);
    expect(confirmations).toHaveLength(1);
    expect(confirmations[0].payload.input_summary).toContain(join(l.workspace, '.env'));
    expect(confirmations[0].payload.input_summary).toContain('may hold secrets');
    expect(end.type).toBe('tool.completed');
  }, 30_000);

  it('an ordinary file inside the workspace is read without asking', async () => {
    const { t, sessionId } = await server();
    const { confirmations, end, row } = await readTurn(t, sessionId, 'notes.txt');
    expect(confirmations).toEqual([]);
    expect(end.type).toBe('tool.completed');
    expect(row.output).toBe('inside content\n');
  }, 30_000);

  it('runtime.outside_workspace: deny fails with permission_denied naming the path and the setting', async () => {
    const { t, l, sessionId } = await server({ outside_workspace: 'deny' });
    for (const path of ['/etc/passwd', '../outside.txt', 'link-out.txt']) {
      const { confirmations, end, row } = await readTurn(t, sessionId, path);
      expect(confirmations).toEqual([]);
      expect(end.type).toBe('tool.failed');
      expect(end.payload.error_class).toBe('permission_denied');
      expect(end.payload.error_message).toContain('runtime.outside_workspace');
      expect(String(row.output)).not.toMatch(/root:|outside content/);
    }
    const { end } = await readTurn(t, sessionId, '../outside.txt');
    expect(end.payload.error_message).toContain(l.outside);
    // Inside is unaffected.
    expect((await readTurn(t, sessionId, 'notes.txt')).row.output).toBe('inside content\n');
  }, 60_000);

  it('runtime.outside_workspace: allow reads outside without asking; secrets still ask', async () => {
    const { t, sessionId } = await server({ outside_workspace: 'allow' });
    const outside = await readTurn(t, sessionId, '../outside.txt');
    expect(outside.confirmations).toEqual([]);
    expect(outside.row.output).toBe('outside content\n');
    const secret = await readTurn(t, sessionId, '.env', [{ decision: 'deny' }]);
    expect(secret.confirmations).toHaveLength(1);
    expect(secret.end.payload.error_class).toBe('user_denied');
  }, 60_000);

  it('"allow for the session" covers later reads outside, never a secrets file', async () => {
    const { t, sessionId } = await server();
    const first = await readTurn(t, sessionId, '../outside.txt', [{ decision: 'allow', scope: 'session' }]);
    expect(first.confirmations).toHaveLength(1);
    const again = await readTurn(t, sessionId, 'link-out.txt');
    expect(again.confirmations).toEqual([]);
    expect(again.row.output).toBe('outside content\n');

    const secret = await readTurn(t, sessionId, '.env', [{ decision: 'allow', scope: 'session' }]);
    expect(secret.confirmations).toHaveLength(1);
    expect(secret.confirmations[0].payload.input_summary).toContain('asked every time');
    const secretAgain = await readTurn(t, sessionId, '.env', [{ decision: 'deny' }]);
    expect(secretAgain.confirmations).toHaveLength(1);
    expect(secretAgain.end.payload.error_class).toBe('user_denied');
  }, 60_000);
});

it('waits on the confirmation: nothing of the outside file is stored before the answer', async () => {
  const { t, sessionId } = await server();
  const { client } = await subscribe(t, sessionId, { snapshot: false });
  await t.submit(sessionId, 'read: ../outside.txt');
  await waitForType(client, 'tool.confirmation_requested');
  const requested = client.events().find((e) => e.type === 'tool.confirmation_requested')!;
  const row = t.runtime.sessions.toolCall(String(requested.payload.tool_use_id), sessionId)!;
  expect(row.status).toBe('pending');
  expect(row.output ?? null).toBeNull();
}, 30_000);
