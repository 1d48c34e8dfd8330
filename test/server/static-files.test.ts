import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY } from '../../src/core/http/static-files.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 15 point 1 (static files, for the dashboard of issue 16): served safely, cached right. */

function site(): string {
  const root = tempDir('metis-static-');
  mkdirSync(join(root, 'assets'));
  writeFileSync(
    join(root, 'index.html'),
    '<!doctype html><script type="module" src="/assets/app.3f9a1c2b.js"></script>',
  );
  writeFileSync(join(root, 'assets', 'app.3f9a1c2b.js'), 'console.log("hi")');
  writeFileSync(join(root, 'assets', 'notes.txt'), 'plain');
  const outside = tempDir('metis-secret-');
  writeFileSync(join(outside, 'secret.txt'), 'do not serve');
  symlinkSync(join(outside, 'secret.txt'), join(root, 'assets', 'link.txt'));
  return root;
}

/** A raw GET (fetch would normalise `..` away before sending). */
function rawGet(url: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { path }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('static files', () => {
  it('serves / and /assets with types, caching and a strict CSP; never a file outside the folder', async () => {
    const t = await startTestServer({}, { staticRoot: site() });
    const page = await fetch(`${t.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    expect(page.headers.get('cache-control')).toBe('no-cache');
    const script = await fetch(`${t.url}/assets/app.3f9a1c2b.js`);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(script.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(await script.text()).toBe('console.log("hi")');
    const etag = script.headers.get('etag')!;
    const again = await fetch(`${t.url}/assets/app.3f9a1c2b.js`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect((await fetch(`${t.url}/assets/notes.txt`)).headers.get('cache-control')).toBe('no-cache');

    for (const path of [
      '/assets/../../etc/passwd',
      '/assets/%2e%2e/%2e%2e/etc/passwd',
      '/assets/link.txt',
      '/assets/nope.js',
      '/assets/',
    ])
      expect(await rawGet(t.url, path), path).toBe(404);
    const post = await fetch(`${t.url}/`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    const nested = await fetch(`${t.url}/assets/deep/er/app.js`, { method: 'DELETE' });
    expect(nested.status).toBe(405);
    expect(nested.headers.get('allow')).toBe('GET, HEAD');
    // The API is unchanged beside it.
    expect((await fetch(`${t.url}/healthz`)).status).toBe(200);
  });

  it('without a static folder, / is not found', async () => {
    const t = await startTestServer();
    expect((await fetch(`${t.url}/`)).status).toBe(404);
  });
});
