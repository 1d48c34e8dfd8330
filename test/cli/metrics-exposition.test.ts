import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { serverToken } from '../helpers/home-token.js';
import { serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/*
 * Issue 29 obs. E: `promtool check metrics` exited 3 on `metis serve`'s GET /metrics, for prom-client's
 * default gauges `nodejs_active_{handles,requests,resources}_total` (the `_total` suffix is a counter's).
 * The exposition of a real `metis serve`, process metrics on, must pass Prometheus's own lint.
 */

const HAS_PROMTOOL = spawnSync('promtool', ['--version']).status === 0;

async function scrapeServe(): Promise<string> {
  const home = tempDir();
  const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
  try {
    const token = serverToken(server.url);
    const response = await fetch(`${server.url}/metrics`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    expect(response.status).toBe(200);
    return await response.text();
  } finally {
    expect(await server.stop('SIGTERM')).toBe(0);
  }
}

describe('GET /metrics of metis serve (issue 29 obs. E)', () => {
  it('has no gauge ending in _total, and passes `promtool check metrics` where promtool is installed', async () => {
    const exposition = await scrapeServe();
    const gauges = [...exposition.matchAll(/^# TYPE (\S+) gauge$/gm)].map((match) => match[1]!);
    // The process metrics are there (the fix must not drop them all), and none is misnamed.
    expect(gauges).toContain('nodejs_active_handles');
    expect(gauges.filter((name) => name.endsWith('_total'))).toEqual([]);

    if (!HAS_PROMTOOL) {
      console.warn('skipping `promtool check metrics`: no promtool on PATH (the _total rule was checked)');
      return;
    }
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
    expect({ status: lint.status, output: `${lint.stdout}${lint.stderr}` }).toEqual({
      status: 0,
      output: '',
    });
  }, 60_000);
});
