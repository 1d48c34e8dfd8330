import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { buildDashboard } from '../helpers/dashboard.js';

/**
 * Issue 16 point 5: the dashboard stays small (JS ≤ 150 KB gzipped) and runs under the server's strict
 * Content-Security-Policy: no inline script or style in its page, every asset a hashed file under assets/.
 */
const JS_BUDGET_GZIP_BYTES = 150 * 1024;

describe('the dashboard build', () => {
  it('ships at most 150 KB of gzipped JavaScript, in hashed files', async () => {
    const root = await buildDashboard();
    const assets = readdirSync(join(root, 'assets'));
    const scripts = assets.filter((name) => name.endsWith('.js'));
    expect(scripts.length).toBeGreaterThan(0);
    for (const name of assets) expect(name).toMatch(/-[A-Za-z0-9_-]{8}\.(js|css)$/);
    const gzipped = scripts.reduce(
      (total, name) => total + gzipSync(readFileSync(join(root, 'assets', name)), { level: 9 }).length,
      0,
    );
    console.log(`dashboard JS: ${(gzipped / 1024).toFixed(1)} KB gzipped (budget 150 KB)`);
    expect(gzipped).toBeLessThanOrEqual(JS_BUDGET_GZIP_BYTES);
  }, 120_000);

  it('has no inline script, inline style or remote asset in its page', async () => {
    const html = readFileSync(join(await buildDashboard(), 'index.html'), 'utf8');
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBeGreaterThan(0);
    for (const [, attributes, body] of scripts) {
      expect(attributes).toMatch(/src="\/assets\//);
      expect(body!.trim()).toBe('');
    }
    expect(html).not.toMatch(/<style\b|\sstyle=|\son[a-z]+=/i);
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
  }, 120_000);
});
