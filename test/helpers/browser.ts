import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { build } from 'esbuild';
import { type Browser, chromium, type Page } from 'playwright-core';

/**
 * Debian's Chromium (`/usr/bin/chromium`, or `$METIS_CHROMIUM`), driven by playwright-core. `.ci/run`
 * installs it and sets METIS_REQUIRE_BROWSER=1, which makes the browser tests fail rather than skip
 * when it is missing.
 */
export const CHROMIUM = process.env.METIS_CHROMIUM ?? '/usr/bin/chromium';
export const browserTestsRun = existsSync(CHROMIUM) || process.env.METIS_REQUIRE_BROWSER === '1';
if (!browserTestsRun)
  console.warn(
    `browser tests skipped: no Chromium at ${CHROMIUM} (install Debian's chromium or set METIS_CHROMIUM)`,
  );

export interface BrowserPage {
  readonly page: Page;
  close(): Promise<void>;
}

/**
 * Bundles `entry` for the browser platform (a Node built-in fails the build), serves it as `/client.js`
 * beside `html` from its own origin (not the metis server's), and opens that page in Chromium.
 */
export async function openPage(entry: string, html: string): Promise<BrowserPage> {
  const bundled = await build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    logLevel: 'silent',
  });
  const script = bundled.outputFiles[0]!.text;
  const server: Server = createServer((request, response) => {
    if (request.url === '/client.js')
      response.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    else response.writeHead(200, { 'content-type': 'text/html' }).end(html);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  let browser: Browser | null = null;
  try {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    const opened = browser;
    return {
      page,
      close: async () => {
        await opened.close();
        server.close();
      },
    };
  } catch (error) {
    await browser?.close();
    server.close();
    throw error;
  }
}
