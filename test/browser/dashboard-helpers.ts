import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import { type MetisServer, type ServerOptions, startServer } from '../../src/core/app/metis-server.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import { openTraceContext, type TraceContext } from '../../src/core/store/trace-context.js';
import { collectPageErrors } from '../helpers/dashboard.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

/**
 * What the dashboard's browser tests share: typing a turn as a person does, reading the turns'
 * statuses, one server for a whole file (the tests of a file add their own sessions to it), a page
 * signed in with a sign-in link, and screenshots in both colour schemes at two widths.
 */

export const DASHBOARD_TOKEN = 'dashboard-test-token-0123456789';
export const AUTH = { authorization: `Bearer ${DASHBOARD_TOKEN}` };

/** Where the tests leave their screenshots for review (test-results/ is not committed). */
export const SCREENSHOT_DIR = join('test-results', 'screenshots');

/** Types a message in the page's box and sends it with the button, as a person does. */
export async function send(page: Page, message: string): Promise<void> {
  await page.getByLabel('Message').fill(message);
  await page.getByRole('button', { name: 'Send' }).click();
}

/** Each turn's status as its footer says it (`in_flight`, `completed`, `failed`, `cancelled`). */
export const turnStatuses = (page: Page): Promise<(string | null)[]> =>
  page
    .locator('[data-turn-status]')
    .evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-turn-status')));

export interface SharedServer {
  readonly url: string;
  readonly server: MetisServer;
  readonly runtime: Runtime;
  readonly context: TraceContext;
  request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  /** A session with one turn per message, each waited for to its end. */
  sessionWithTurns(messages: readonly string[]): Promise<string>;
}

/**
 * For a describe block: one real server (port 0, SQLite in a temp folder, the scripted model) for
 * all its tests, started before them and closed after. Read its fields inside the tests.
 */
export function sharedDashboardServer(
  root: () => string,
  config: RuntimeConfigInput = {},
  options: Pick<ServerOptions, 'dashboardContent'> = {},
): SharedServer {
  let state: { server: MetisServer; runtime: Runtime; context: TraceContext; dir: string } | undefined;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'metis-dashboard-test-'));
    const context = openTraceContext({ validation: 'strict', dbPath: join(dir, 'metis.db') });
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      config: testRuntimeConfig(config),
    });
    const server = await startServer(runtime, context, {
      port: 0,
      staticRoot: root(),
      bearerToken: DASHBOARD_TOKEN,
      ...options,
    });
    state = { server, runtime, context, dir };
  }, 120_000);
  afterAll(async () => {
    if (state === undefined) return;
    await state.server.close();
    await state.runtime.close();
    state.context.close();
    rmSync(state.dir, { recursive: true, force: true });
  });
  const request: SharedServer['request'] = async (method, path, body) => {
    const response = await fetch(`${state!.server.url}${path}`, {
      method,
      headers:
        body === undefined && method === 'GET' ? AUTH : { 'content-type': 'application/json', ...AUTH },
      body: body === undefined ? (method === 'GET' ? undefined : '{}') : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
  return {
    get url() {
      return state!.server.url;
    },
    get server() {
      return state!.server;
    },
    get runtime() {
      return state!.runtime;
    },
    get context() {
      return state!.context;
    },
    request,
    sessionWithTurns: async (messages) => {
      const sessionId = (await request('POST', '/sessions', { workspace_path: state!.dir })).body
        .session_id as string;
      for (const message of messages) {
        const submitted = await request('POST', `/sessions/${sessionId}/turns`, { message });
        if (submitted.status !== 202) throw new Error(`submit failed: ${JSON.stringify(submitted.body)}`);
        await expect
          .poll(
            async () =>
              (await request('GET', `/sessions/${sessionId}/trace?limit=5000`)).body.events.some(
                (e: any) =>
                  e.turn_id === submitted.body.turn_id &&
                  (e.type === 'turn.completed' || e.type === 'turn.cancelled'),
              ),
            { timeout: 15_000 },
          )
          .toBe(true);
      }
      return sessionId;
    },
  };
}

export interface OpenedPage {
  readonly page: Page;
  readonly errors: string[];
}

/** A page signed in the way a person is: a sign-in link (a single-use code) traded for the access key. */
export async function openSignedIn(
  browser: Browser,
  server: { server: MetisServer },
  hash = '',
  options: {
    width?: number;
    colorScheme?: 'light' | 'dark';
    /** Runs before the page opens: routes that must see its first requests and its stream. */
    prepare?: (page: Page) => Promise<void>;
  } = {},
): Promise<OpenedPage & { close: () => Promise<void> }> {
  const context = await browser.newContext({
    colorScheme: options.colorScheme ?? 'light',
    viewport: { width: options.width ?? 1400, height: 900 },
  });
  const page = await context.newPage();
  // A missing element fails the test in seconds, with its name, rather than at the test's timeout.
  page.setDefaultTimeout(10_000);
  const errors = collectPageErrors(page);
  await options.prepare?.(page);
  await page.goto(`${server.server.signInLink()}${hash}`);
  return { page, errors, close: () => context.close() };
}

/**
 * The page as it is now, in light and dark, at 1,400 and 900 px wide: `ready` waits for what must
 * be drawn after a resize or a scheme change.
 */
export async function screenshotsOf(
  browser: Browser,
  server: { server: MetisServer },
  name: string,
  hash: string,
  ready: (page: Page) => Promise<void>,
): Promise<void> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  for (const colorScheme of ['light', 'dark'] as const) {
    const opened = await openSignedIn(browser, server, hash, { width: 1400, colorScheme });
    try {
      for (const width of [1400, 900]) {
        await opened.page.setViewportSize({ width, height: 900 });
        await ready(opened.page);
        await opened.page.screenshot({
          path: join(SCREENSHOT_DIR, `${name}-${colorScheme}-${width}.png`),
          fullPage: true,
        });
      }
    } finally {
      await opened.close();
    }
  }
}
