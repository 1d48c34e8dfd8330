import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 16: `metis serve` names the dashboard's sign-in link, and `metis dashboard` prints fresh ones. */
describe('metis dashboard', () => {
  it('prints a single-use sign-in link to the server of this account, never the token', async () => {
    const home = tempDir('metis-home-');
    const page = tempDir('metis-page-');
    writeFileSync(join(page, 'index.html'), '<!doctype html><title>metis</title>');
    const config = join(home, 'metis.config.json');
    writeFileSync(config, JSON.stringify({ server: { dashboard: page } }));
    const server = await serveCli(home, ['--config', config, '--db', join(home, 'metis.db')]);
    const banner = JSON.parse(server.stdout().split('\n')[0]!);
    expect(banner.dashboard_url).toMatch(new RegExp(`^${server.url}/\\?login=atk_`));
    const token = readFileSync(join(home, 'token'), 'utf8').trim();

    const printed = await runCli(['dashboard', '--url', server.url], home);
    expect(printed.exitCode).toBe(0);
    const link = /^(http:\S+)$/m.exec(printed.stdout)![1]!;
    expect(link).toMatch(new RegExp(`^${server.url}/\\?login=atk_`));
    expect(printed.stdout).toContain('works once, within 15 minutes');
    expect(printed.stdout + server.stdout()).not.toContain(token);
    // The page trades the link's code for its access key, once.
    const trade = () =>
      fetch(`${server.url}/dashboard/sign-in`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ login: new URL(link).searchParams.get('login') }),
      });
    expect((await trade()).status).toBe(200);
    expect((await trade()).status).toBe(401);

    const json = await runCli(['dashboard', '--json', '--url', server.url], home);
    expect(JSON.parse(json.stdout)).toMatchObject({
      url: expect.stringContaining('?login='),
      expires_in_seconds: 900,
    });
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('refuses a dashboard folder without index.html at start-up, naming the setting', async () => {
    const home = tempDir('metis-home-');
    const config = join(home, 'metis.config.json');
    writeFileSync(config, JSON.stringify({ server: { dashboard: home } }));
    const result = await runCli(
      ['serve', '--port', '0', '--config', config, '--db', join(home, 'metis.db')],
      home,
    );
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('server.dashboard');
    expect(result.stderr).not.toMatch(/\n\s+at /);
  }, 60_000);
});
