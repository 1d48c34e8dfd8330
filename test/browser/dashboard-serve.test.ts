import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { collectPageErrors, dashboardInChromium, screenshot } from '../helpers/dashboard.js';
import { spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 16, done when: `metis serve` (the real CLI, a child process) prints the dashboard's URL; opening
 * it shows the sessions; a server that goes away shows "disconnected, retrying" and the page recovers by
 * itself when a server is back on the same address.
 */

const DASHBOARD_LINE = /^ {2}dashboard +(http:\/\/\S+)$/m;

describe.runIf(browserTestsRun)('metis serve and the dashboard', () => {
  const chromium = dashboardInChromium();

  function serve(home: string, port: number) {
    const config = join(home, 'metis.config.json');
    writeFileSync(config, JSON.stringify({ server: { port, dashboard: chromium.root } }));
    const child = spawnCli(['serve', '--config', config, '--db', join(home, 'metis.db')], home);
    return child;
  }

  it('prints a URL that opens on the sessions; a server gone shows "disconnected, retrying", then recovers', async () => {
    const home = tempDir('metis-dashboard-home-');
    const first = serve(home, 0);
    await first.waitForStdout((out) => DASHBOARD_LINE.test(out), 30_000);
    const link = DASHBOARD_LINE.exec(first.stdout())![1]!;
    expect(link).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?login=atk_\S{16,}$/);
    expect(first.stdout()).not.toContain(readFileSync(join(home, 'token'), 'utf8').trim());
    const port = Number(new URL(link).port);

    const context = await chromium.browser.newContext();
    onTestFinished(() => context.close());
    const page = await context.newPage();
    const errors = collectPageErrors(page);
    await page.goto(link);
    await expect.poll(() => page.textContent('main'), { timeout: 15_000 }).toContain('No sessions yet');
    await screenshot(page, 'serve-sessions');
    // A second tab on a session: its stream shows the drop and the resume.
    await page.getByTestId('new-session').click();
    await page.waitForURL(/#\/sessions\/sess_/);
    const sessionTab = await context.newPage();
    await sessionTab.goto(page.url());
    await expect.poll(() => sessionTab.getByTestId('link').textContent(), { timeout: 15_000 }).toBe('live');
    await page.goto(link.split('?')[0]!);
    await expect.poll(() => page.locator('tr[data-session]').count(), { timeout: 15_000 }).toBe(1);

    await first.stop('SIGTERM');
    await expect
      .poll(() => page.textContent('main'), { timeout: 15_000 })
      .toContain('disconnected, retrying');
    await expect
      .poll(() => sessionTab.getByTestId('link').textContent(), { timeout: 15_000 })
      .toBe('reconnecting…');
    await screenshot(page, 'disconnected');

    const second = serve(home, port);
    await second.waitForStdout((out) => DASHBOARD_LINE.test(out), 30_000);
    await expect.poll(() => page.textContent('main'), { timeout: 15_000 }).not.toContain('disconnected');
    expect(await page.locator('tr[data-session]').count()).toBe(1);
    await expect
      .poll(() => sessionTab.getByTestId('link').textContent(), { timeout: 15_000 })
      .toMatch(/^live · resumed, \d+ events? replayed$/);
    // The access key still holds: derived from the same token (the home's token file), kept by the page.
    expect(errors.filter((e) => !/ERR_CONNECTION_REFUSED|Failed to fetch/.test(e))).toEqual([]);
    await second.stop('SIGTERM');
  });
});
