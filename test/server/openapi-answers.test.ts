import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { loadPlugins } from '../../src/plugins/load-plugins.js';
import { startPlugins } from '../../src/plugins/plugin-host.js';
import { pluginsRoute } from '../../src/plugins/plugins-route.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 29 point 3: the answer schemas of `GET /openapi.json` are written from what the handlers return.
 * Real answers are checked against the document: every field the schema requires is there with its
 * type, and no field is left out of the schema (the objects are open to later additions, so a client
 * would not notice one; this test does).
 */

const TOKEN = 'openapi-answers-test-token-0123456789';

/** A JSON Schema as zod's `toJSONSchema` writes one (the subset it uses). */
interface Schema {
  readonly type?: string | string[];
  readonly properties?: Record<string, Schema>;
  readonly required?: string[];
  readonly additionalProperties?: Schema | boolean;
  readonly items?: Schema;
  readonly anyOf?: Schema[];
  readonly enum?: unknown[];
  readonly const?: unknown;
  readonly pattern?: string;
}

function typeMatches(types: string[], value: unknown): boolean {
  if (value === null) return types.includes('null');
  if (Array.isArray(value)) return types.includes('array');
  if (typeof value === 'number')
    return types.includes('number') || (types.includes('integer') && Number.isInteger(value));
  return types.includes(typeof value);
}

/** What is wrong with `value` as `schema` describes it, strictly: a field it does not name is wrong. */
function problems(schema: Schema, value: unknown, at: string): string[] {
  if (schema.anyOf)
    return schema.anyOf.some((option) => problems(option, value, at).length === 0)
      ? []
      : [`${at}: ${JSON.stringify(value)} matches no anyOf option`];
  if ('const' in schema && value !== schema.const)
    return [`${at}: ${JSON.stringify(value)} is not the const`];
  if (schema.enum && !schema.enum.includes(value)) return [`${at}: ${JSON.stringify(value)} is not in enum`];
  if (schema.type !== undefined && !typeMatches([schema.type].flat(), value))
    return [`${at}: ${JSON.stringify(value)} is not ${[schema.type].flat().join(' | ')}`];
  if (schema.pattern !== undefined && typeof value === 'string' && !new RegExp(schema.pattern).test(value))
    return [`${at}: ${value} does not match ${schema.pattern}`];
  if (Array.isArray(value) && schema.items)
    return value.flatMap((item, index) => problems(schema.items!, item, `${at}[${index}]`));
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [];
  if (schema.properties === undefined && schema.additionalProperties === undefined) return [];
  const found = [];
  for (const key of schema.required ?? []) if (!(key in value)) found.push(`${at}.${key}: missing`);
  for (const [key, field] of Object.entries(value)) {
    const described = schema.properties?.[key] ?? schema.additionalProperties;
    if (described === undefined || described === false) found.push(`${at}.${key}: not in the schema`);
    else if (described !== true) found.push(...problems(described, field, `${at}.${key}`));
  }
  return found;
}

describe('the answers GET /openapi.json describes', () => {
  it('are what the routes answer, field for field', async () => {
    const context = { dataDir: tempDir('metis-plugins-') };
    const loaded = await loadPlugins([['jsonl-sink', { path: join(context.dataDir, 'events.jsonl') }]], {
      configPath: null,
    });
    let host: Awaited<ReturnType<typeof startPlugins>> | null = null;
    const t = await startTestServer(
      { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } },
      // The host starts on the server's bus, after the server: the route asks it when called.
      {
        bearerToken: TOKEN,
        extraRoutes: () => [pluginsRoute({ list: () => host!.list(), stop: async () => {} })],
      },
    );
    host = await startPlugins(loaded, {
      bus: t.context.bus,
      store: t.context.store,
      logger: silentLogger(),
      dataDir: context.dataDir,
    });
    onTestFinished(() => host?.stop());
    const auth = { authorization: `Bearer ${TOKEN}` };
    const document = (await t.request('GET', '/openapi.json')).body;
    const checked = new Set<string>();

    /** Calls a route and checks its answer against the schema of its documented success. */
    const call = async (method: string, template: string, path: string, body?: unknown) => {
      const answer = await t.request(method, path, body, auth);
      const responses = document.paths[template][method.toLowerCase()].responses;
      const success = Object.keys(responses).find((status) => status.startsWith('2'))!;
      expect(answer.status, `${method} ${path}: ${JSON.stringify(answer.body)}`).toBe(Number(success));
      const schema = responses[success].content['application/json'].schema as Schema;
      expect(schema.type, `${method} ${template} has an answer schema`).toBe('object');
      expect(problems(schema, answer.body, `${method} ${template}`)).toEqual([]);
      checked.add(`${method} ${template}`);
      return answer.body;
    };

    await call('GET', '/healthz', '/healthz');
    await call('GET', '/openapi.json', '/openapi.json');
    const created = await call('POST', '/sessions', '/sessions', { workspace_path: t.workspace });
    const id: string = created.session_id;
    const turn = await call('POST', '/sessions/{session_id}/turns', `/sessions/${id}/turns`, {
      message: 'run: echo hi',
    });
    let waiting: any[] = [];
    for (let tries = 0; waiting.length === 0 && tries < 200; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      waiting = (await t.request('GET', `/sessions/${id}/confirmations`, undefined, auth)).body.confirmations;
    }
    // A non-empty list, so the schema of an entry is checked too.
    const listed = await call('GET', '/sessions/{session_id}/confirmations', `/sessions/${id}/confirmations`);
    expect(listed.confirmations).toHaveLength(1);
    await call(
      'POST',
      '/sessions/{session_id}/confirmations/{confirmation_request_id}',
      `/sessions/${id}/confirmations/${waiting[0].confirmation_request_id}`,
      { decision: 'allow' },
    );
    await t.runtime.currentTurn(id)?.done;

    const sessions = await call('GET', '/sessions', '/sessions');
    expect(sessions.sessions.length).toBeGreaterThan(0);
    await call('GET', '/sessions/{session_id}', `/sessions/${id}`);
    const cancelled = await call(
      'POST',
      '/sessions/{session_id}/turns/{turn_id}/cancel',
      `/sessions/${id}/turns/${turn.turn_id}/cancel`,
      {},
    );
    expect(cancelled.status).toBe('already_ended');
    const messages = await call('GET', '/sessions/{session_id}/messages', `/sessions/${id}/messages`);
    expect(messages.messages.length).toBeGreaterThan(1);
    await call('POST', '/sessions/{session_id}/feedback', `/sessions/${id}/feedback`, {
      rating: 'thumbs_up',
      turn_id: turn.turn_id,
    });
    await call('PUT', '/sessions/{session_id}/model', `/sessions/${id}/model`, { model: 'scripted:sticky' });
    const trace = await call('GET', '/sessions/{session_id}/trace', `/sessions/${id}/trace`);
    expect(trace.events.length).toBeGreaterThan(5);
    await call('GET', '/store/stats', '/store/stats');
    await call('GET', '/models', '/models');
    await call('POST', '/patterns/clear', '/patterns/clear');
    await call('POST', '/dashboard/sign-in-link', '/dashboard/sign-in-link');
    await call('POST', '/dashboard/sign-in', '/dashboard/sign-in', { token: TOKEN });
    const plugins = await call('GET', '/plugins', '/plugins');
    expect(plugins.plugins).toHaveLength(1);
    await call('POST', '/sessions/{session_id}/end', `/sessions/${id}/end`, {});
    await call('GET', '/healthz', '/healthz');

    expect(checked.size).toBe(20);
  });
});
