import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 15 point 2: GET /openapi.json, generated from the route declarations (never hand-written), is a
 * valid OpenAPI 3.1 document that names every route docs/http-api.md lists, and every route it names is
 * served.
 */

/** (method, path) of each row of the Routes table of docs/http-api.md, with OpenAPI's path syntax. */
function documentedRoutes(): [string, string][] {
  const text = readFileSync('docs/http-api.md', 'utf8');
  const section = text.slice(text.indexOf('## Routes'), text.indexOf('\n## ', text.indexOf('## Routes') + 1));
  return [...section.matchAll(/^\| `(GET|POST|PUT)`\s*\| `([^`]+)`/gm)].map(([, method, path]) => [
    method!,
    path!.split('?')[0]!,
  ]);
}

describe('GET /openapi.json', () => {
  it('is valid OpenAPI 3.1 and covers every route of docs/http-api.md, with its errors', async () => {
    const t = await startTestServer();
    const { status, body } = await t.request('GET', '/openapi.json');
    expect(status).toBe(200);
    const result = await new Validator().validate(body);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    const listed = documentedRoutes();
    expect(listed.length).toBeGreaterThanOrEqual(15);
    const described = Object.entries(body.paths as Record<string, Record<string, unknown>>).flatMap(
      ([path, ops]) => Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`),
    );
    for (const [method, path] of listed) expect(described).toContain(`${method} ${path}`);
    // Its errors, by status, named; a body's schema as the route validates it.
    const submit = body.paths['/sessions/{session_id}/turns'].post;
    expect(Object.keys(submit.responses)).toEqual(
      expect.arrayContaining(['202', '400', '401', '404', '409', '413', '415', '503', '507']),
    );
    expect(submit.responses['409'].description).toContain('METIS_ERR_TURN_IN_FLIGHT');
    expect(submit.requestBody.content['application/json'].schema).toMatchObject({
      type: 'object',
      required: ['message'],
      additionalProperties: false,
    });
    expect(body.paths['/sessions/{session_id}/events'].get.parameters.map((p: any) => p.name)).toEqual(
      expect.arrayContaining(['session_id', 'filter', 'since', 'snapshot', 'token']),
    );
    expect(body.paths['/healthz'].get.security).toEqual([]);
  });

  it('names every route the framework serves, with its method (HEAD aside)', async () => {
    const dashboard = mkdtempSync(join(tmpdir(), 'metis-static-'));
    writeFileSync(join(dashboard, 'index.html'), '<!doctype html>');
    const t = await startTestServer({}, { staticRoot: dashboard });
    const { body } = await t.request('GET', '/openapi.json');
    const paths = body.paths as Record<string, Record<string, unknown>>;
    const served = t.server.served.filter((route) => route.method !== 'HEAD');
    expect(served.length).toBeGreaterThanOrEqual(20);
    expect(served.map((route) => `${route.method} ${route.path}`)).toEqual(
      expect.arrayContaining(['GET /', 'GET /assets/{file}', 'GET /metrics', 'POST /api/chat']),
    );
    for (const route of served)
      expect(paths[route.path]?.[route.method.toLowerCase()], `${route.method} ${route.path}`).toBeDefined();
  });

  it('every route it describes is served: none answers "no route" or 405', async () => {
    const t = await startTestServer();
    const { body } = await t.request('GET', '/openapi.json');
    const sessionId = await t.createSession();
    for (const [path, ops] of Object.entries(body.paths as Record<string, Record<string, any>>)) {
      const concrete = path.replace('{session_id}', sessionId).replace(/\{[^}]+\}/g, 'x');
      for (const method of Object.keys(ops)) {
        const controller = new AbortController();
        const response = await fetch(`${t.url}${concrete}`, {
          method: method.toUpperCase(),
          headers: method === 'get' ? {} : { 'content-type': 'application/json' },
          body: method === 'get' ? undefined : '{}',
          signal: controller.signal,
        });
        // A stream answers 200 and stays open: its headers are enough.
        const text = response.headers.get('content-type')?.startsWith('text/event-stream')
          ? ''
          : await response.text();
        controller.abort();
        expect(
          [404, 405].includes(response.status) && /no route|not allowed/.test(text),
          `${method} ${path}: ${text}`,
        ).toBe(false);
      }
    }
  });
});
