import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import openapiTS, { astToString, type OpenAPI3 } from 'openapi-typescript';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 29 point 3: a client generated from `GET /openapi.json` types its answers. The document is
 * fetched without the token, as `npx openapi-typescript http://…/openapi.json` does, turned into types by
 * the real openapi-typescript, and a program reading the answers is typechecked against them: a field
 * the API returns compiles, a misspelt one does not (were answers typed `{}` or `any`, one of the two
 * would fail).
 */

const TOKEN = 'openapi-client-test-token-0123456789';

/** What a client of the generated types writes, in the shape openapi-fetch hands answers back. */
const CLIENT = `import type { paths } from './api.js';

type Json<R> = R extends { content: { 'application/json': infer A } } ? A : never;
type Created = Json<paths['/sessions']['post']['responses'][201]>;
type Handshake = Json<paths['/sessions/{session_id}']['get']['responses'][200]>;
type Listed = Json<paths['/sessions']['get']['responses'][200]>;

declare const created: { data: Created };
declare const handshake: { data: Handshake };
declare const listed: { data: Listed };

export const sessionId: string = created.data.session_id;
export const wsUrl: string = handshake.data.ws_url;
export const turns: number = handshake.data.session.turn_count;
export const lastActivity: string | null = listed.data.sessions[0]!.last_activity_at;
`;

/** Diagnostics of each file of a strict typecheck of `files` (name → text), keyed by file name. */
function typecheck(dir: string, files: Record<string, string>): Record<string, string[]> {
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const names = Object.keys(files).map((name) => join(dir, name));
  const program = ts.createProgram(names, {
    strict: true,
    noUncheckedIndexedAccess: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2022.d.ts'],
    types: [],
    skipLibCheck: true,
  });
  const found: Record<string, string[]> = Object.fromEntries(Object.keys(files).map((name) => [name, []]));
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const file = diagnostic.file ? (diagnostic.file.fileName.split('/').pop() ?? '') : '(program)';
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    found[file] = [...(found[file] ?? []), message];
  }
  return found;
}

describe('a client generated from GET /openapi.json', () => {
  it('fetches the document without the token and types the answers it reads', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });

    const document = await fetch(`${t.url}/openapi.json`);
    expect(document.status).toBe(200);
    const body = (await document.json()) as Record<string, any>;
    expect(body.paths['/openapi.json'].get.security).toEqual([]);
    // Every other route keeps its lock.
    expect((await fetch(`${t.url}/sessions`)).status).toBe(401);
    expect((await fetch(`${t.url}/models`)).status).toBe(401);

    const source = astToString(await openapiTS(body as OpenAPI3));
    const dir = tempDir('metis-openapi-client-');
    const diagnostics = typecheck(dir, {
      'api.ts': source,
      'client.ts': CLIENT,
      'misspelt.ts': CLIENT.replace('created.data.session_id', 'created.data.sesion_id'),
    });

    expect(diagnostics['(program)'] ?? []).toEqual([]);
    expect(diagnostics['api.ts']).toEqual([]);
    expect(diagnostics['client.ts']).toEqual([]);
    expect(diagnostics['misspelt.ts']).toHaveLength(1);
    expect(diagnostics['misspelt.ts']![0]).toMatch(/Property 'sesion_id' does not exist/);
  });
});
