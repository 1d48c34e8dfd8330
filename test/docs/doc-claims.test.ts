import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROPOSED_PRICES, PROVIDER_DEFAULTS, providerName } from '../../src/commands/init-template.js';
import { runCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 29, point 6: claims of the README and docs/ that had drifted from the code, each checked against
 * the code itself (its help, a real server), so the next drift fails here.
 */

const ROOT = join(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

describe('docs that say what the code does', () => {
  it("the README's send row names the exit statuses `metis send --help` lists", async () => {
    const help = await runCli(['send', '--help'], tempDir());
    const statuses = (text: string) => [...text.matchAll(/\b(\d{1,3}) [a-z-]/g)].map((m) => m[1]);
    const listed = statuses(help.stdout.split('Exit status with --follow:')[1] ?? '');
    expect(listed).toEqual(['0', '1', '3', '124', '130']);
    const row = read('README.md')
      .split('\n')
      .find((line) => line.startsWith('| `metis send '));
    expect(row).toBeDefined();
    for (const status of listed) expect(row!).toMatch(new RegExp(`\\b${status} [a-z]`));
  }, 30_000);

  it('a page on a loopback origin may call the server without being listed (CORS), as the README says', async () => {
    const readme = read('README.md');
    expect(readme).toContain('A page served from a loopback origin');
    expect(readme).toContain('needs it listed in `server.allowed_origins`');
    const t = await startTestServer();
    for (const origin of ['http://localhost:5173', 'http://127.0.0.1:3000']) {
      const preflight = await fetch(`${t.url}/sessions`, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST' },
      });
      expect(preflight.status).toBe(204);
      expect(preflight.headers.get('access-control-allow-origin')).toBe(origin);
    }
    const elsewhere = await fetch(`${t.url}/sessions`, {
      method: 'OPTIONS',
      headers: { origin: 'https://example.com', 'access-control-request-method': 'POST' },
    });
    expect(elsewhere.status).toBe(403);
  });

  it("ws_url follows the request's Host, as docs/http-api.md says", async () => {
    const doc = read('docs/http-api.md');
    expect(doc).toContain("`ws_url` is built from the request's `Host` header");
    expect(doc).not.toContain("not from the request's `Host`");
    const t = await startTestServer();
    const session = await t.createSession();
    const port = new URL(t.url).port;
    // fetch sets Host itself: node:http sends the one given, as a client behind a proxy would see it.
    const { status, body } = await getWithHost(`${t.url}/sessions/${session}`, `localhost:${port}`);
    expect(status).toBe(200);
    expect(String(body.ws_url)).toMatch(
      new RegExp(`^ws://localhost:${port}/sessions/${session}/stream\\?attach=`),
    );
  });

  it('the Anthropic and OpenAI model ids of the README and docs/configuration.md are the ones metis init proposes and prices', () => {
    const proposed = (['anthropic', 'openai'] as const).map(
      (provider) => `${providerName(provider)}:${PROVIDER_DEFAULTS[provider].model}`,
    );
    for (const id of proposed) expect(Object.keys(PROPOSED_PRICES)).toContain(id);
    for (const file of ['README.md', 'docs/configuration.md']) {
      const ids = [...read(file).matchAll(/\b(?:anthropic|openai):[\w.-]+/g)].map((m) => m[0]);
      expect(ids.length, file).toBeGreaterThan(0);
      for (const id of ids) expect(proposed, `${file}: ${id}`).toContain(id);
    }
  });
});

/** A GET with this Host header, its status and JSON body. */
function getWithHost(url: string, host: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const sent = httpRequest(url, { headers: { host } }, (response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => {
        text += chunk.toString();
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) }));
    });
    sent.on('error', reject);
    sent.end();
  });
}
