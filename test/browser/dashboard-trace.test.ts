import type { Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { browserTestsRun } from '../helpers/browser.js';
import { dashboardInChromium } from '../helpers/dashboard.js';
import { openSignedIn, screenshotsOf, sharedDashboardServer } from './dashboard-helpers.js';

/**
 * Issue 30, observations 2, 3 and 5 in a real Chromium: the trace page as a span tree per turn (not
 * a chain of events), with the words beside each span, a per-turn waterfall with zoom, cancelled
 * and failed turns coloured, scores on turns and sessions, and a details panel that never lies over
 * the tree or the events table. One server for the file; the sessions are made once, up front.
 */

describe.runIf(browserTestsRun)('the trace page (issue 30)', () => {
  const chromium = dashboardInChromium();
  const t = sharedDashboardServer(() => chromium.root);
  const redacting = sharedDashboardServer(() => chromium.root, {}, { dashboardContent: 'redacted' });
  let traced: Promise<{ main: string; cancelled: string }> | null = null;

  /** One session with a tool, a delegation, a memory change and a failed turn; one cancelled turn. */
  function sessions(): Promise<{ main: string; cancelled: string }> {
    traced ??= (async () => {
      const main = await t.sessionWithTurns([
        'think: run: echo hi',
        'delegate: count the files',
        'remember: tea',
      ]);
      const cancelled = (await t.request('POST', '/sessions', {})).body.session_id as string;
      const turn = await t.request('POST', `/sessions/${cancelled}/turns`, { message: 'slow: a long story' });
      await expect
        .poll(
          async () =>
            (await t.request('POST', `/sessions/${cancelled}/turns/${turn.body.turn_id}/cancel`)).status,
        )
        .toBe(202);
      // Last: a failing model makes the provider unavailable for a while.
      const starts = (await t.request('GET', `/sessions/${main}/trace?limit=5000`)).body.events.filter(
        (e: any) => e.type === 'turn.started',
      );
      const rated = { rating: 'thumbs_up', comment: 'spot on', turn_id: starts[2].turn_id };
      expect((await t.request('POST', `/sessions/${main}/feedback`, rated)).status).toBe(201);
      expect((await t.request('POST', `/sessions/${main}/feedback`, { rating: 'thumbs_down' })).status).toBe(
        201,
      );
      const failing = await t.request('POST', `/sessions/${main}/turns`, { message: 'fail: auth' });
      expect(failing.status).toBe(202);
      await expect
        .poll(
          async () => (await t.request('GET', `/sessions/${main}/trace?limit=5000`)).body.events.at(-1)?.type,
          {
            timeout: 15_000,
          },
        )
        .toMatch(/turn\.completed|routing\./);
      return { main, cancelled };
    })();
    return traced;
  }

  async function open(hash: string, width = 1400): Promise<{ page: Page; errors: string[] }> {
    const opened = await openSignedIn(chromium.browser, t, hash, { width });
    onTestFinished(opened.close);
    await expect.poll(() => opened.page.getByTestId('span-tree').count(), { timeout: 10_000 }).toBe(1);
    return opened;
  }

  it('draws a span tree per turn: a tool under the model call that asked for it, a worker turn under its delegation', async () => {
    const { main } = await sessions();
    const { page, errors } = await open(`#/sessions/${main}/trace`);
    const tree = page.getByTestId('span-tree');
    const turns = tree.locator(':scope > li[data-span-kind="turn"]');
    await expect.poll(() => turns.count(), { timeout: 10_000 }).toBe(4);
    // Turn 1: turn → two model calls; the shell tool nests under the first, not under the event before it.
    const first = turns.nth(0);
    const kinds = (scope: typeof first, selector: string) =>
      scope.locator(selector).evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-span-kind')));
    const below = ':scope > ul.span-children > li';
    expect(await kinds(first, below)).toEqual(['model', 'model']);
    expect(await kinds(first, `${below}:nth-child(1) > ul.span-children > li`)).toEqual(['tool']);
    expect(await kinds(first, `${below}:nth-child(2) > ul.span-children > li`)).toEqual([]);
    // Turn 2: turn → model call → tool delegate → delegation → the worker's turn → its model call.
    const chain = await turns
      .nth(1)
      .locator('li[data-span-kind="turn"] li[data-span-kind="model"]')
      .evaluate((node) => {
        const path: string[] = [];
        for (let at: any = node; at !== null; at = at.parentElement?.closest('li[data-span-kind]') ?? null)
          path.unshift(at.getAttribute('data-span-kind'));
        return path;
      });
    expect(chain).toEqual(['turn', 'model', 'tool', 'delegate', 'turn', 'model']);
    // Rows do not repeat the session id; the memory change shows inside the tool that made it.
    expect(await tree.textContent()).not.toContain(main);
    expect(await turns.nth(2).locator('li[data-span-kind="tool"] [data-mark="memory.updated"]').count()).toBe(
      1,
    );
    expect(await first.locator('[data-mark="route.decided"]').textContent()).toContain(
      'routed to scripted:demo',
    );
    // Durations and statuses on every span.
    expect(await first.locator('.span-row .took').first().textContent()).toMatch(/\d+ ms|\d\.\d+ s/);
    expect(errors).toEqual([]);
  });

  it('shows beside each span what a person reads it for: the user message, thinking and text, the tool input and output', async () => {
    const { main } = await sessions();
    const { page, errors } = await open(`#/sessions/${main}/trace`);
    const first = page.locator('[data-testid="span-tree"] > li').first();
    const said = (scope: ReturnType<Page['locator']>, name: string) =>
      scope.locator(`:scope > .span-row [data-said="${name}"]`).textContent();
    await expect.poll(() => said(first, 'user'), { timeout: 10_000 }).toContain('think: run: echo hi');
    const calls = first.locator(':scope > ul.span-children > li[data-span-kind="model"]');
    expect(await said(calls.nth(0), 'thinking')).toContain('The user asks: run: echo hi');
    expect(await said(calls.nth(1), 'text')).toContain('The tool returned');
    const tool = calls.nth(0).locator('li[data-span-kind="tool"]');
    expect(await said(tool, 'input')).toContain('echo hi');
    expect(await said(tool, 'output')).toContain('hi');
    // In full in the panel: the tool's whole input and output.
    await tool.locator('.span-label').first().click();
    const detail = page.getByTestId('span-detail');
    await expect
      .poll(() => detail.locator('[data-field="Input"] pre').textContent(), { timeout: 5_000 })
      .toContain('"command": "echo hi"');
    expect(await detail.locator('[data-field="Output"]').textContent()).toContain('hi');
    expect(errors).toEqual([]);
  });

  it('says "redacted (n chars)" where the server withholds the words (server.dashboard_content: redacted)', async () => {
    const sessionId = await redacting.sessionWithTurns(['think: run: echo hi']);
    const opened = await openSignedIn(chromium.browser, redacting, `#/sessions/${sessionId}/trace`);
    onTestFinished(opened.close);
    const turn = opened.page.locator('[data-testid="span-tree"] > li').first();
    await expect
      .poll(() => turn.locator(':scope > .span-row [data-said="user"]').textContent(), { timeout: 10_000 })
      .toBe(`user redacted (${'think: run: echo hi'.length} chars)`);
    expect(await turn.textContent()).not.toContain('echo hi');
  });

  it('colours a failed turn red and a cancelled one, and shows the feedback on its turn', async () => {
    const { main, cancelled } = await sessions();
    const { page } = await open(`#/sessions/${main}/trace`);
    const turns = page.locator('[data-testid="span-tree"] > li');
    await expect.poll(() => turns.count(), { timeout: 10_000 }).toBe(4);
    expect(await turns.nth(3).getAttribute('data-status')).toBe('failed');
    const colour = (scope: ReturnType<Page['locator']>, property: string) =>
      scope.evaluate((node, name) => (globalThis as any).getComputedStyle(node)[name], property);
    const errorColour = await page
      .locator('body')
      .evaluate((body) => (globalThis as any).getComputedStyle(body).getPropertyValue('--error').trim());
    expect(errorColour).toBe('#cf222e');
    expect(await colour(turns.nth(3), 'borderLeftColor')).toBe('rgb(207, 34, 46)');
    expect(
      await turns.nth(2).locator(':scope > .marks [data-mark="feedback.explicit"]').textContent(),
    ).toContain('spot on');
    // Rating a turn from the page: its score shows beside it.
    await turns.nth(1).getByRole('button', { name: 'Bad', exact: true }).click();
    await expect
      .poll(() => turns.nth(1).locator(':scope > .marks [data-mark="feedback.explicit"]').textContent(), {
        timeout: 10_000,
      })
      .toBe('rated bad');
    expect(
      await page.getByTestId('trace-summary').locator('[data-score="feedback.explicit"]').textContent(),
    ).toContain('rated bad');
    await page.goto(page.url().replace(main, cancelled));
    const only = page.locator('[data-testid="span-tree"] > li');
    await expect.poll(() => only.getAttribute('data-status'), { timeout: 10_000 }).toBe('cancelled');
    expect(await colour(only, 'borderLeftColor')).toBe('rgb(154, 103, 0)');
  });

  it('keeps the details panel beside the events table at 1,400 px, and below it at 900 px', async () => {
    const { main } = await sessions();
    for (const width of [1400, 900]) {
      const { page } = await open(`#/sessions/${main}/trace`, width);
      await page.getByRole('tab', { name: 'Events' }).click();
      await page.locator('table.events [data-event-type="tool.called"]').first().click();
      await expect.poll(() => page.getByTestId('span-detail').count(), { timeout: 5_000 }).toBe(1);
      const boxes = await page.evaluate(() => {
        const doc = (globalThis as any).document;
        const box = (node: any) => node.getBoundingClientRect();
        const table = box(doc.querySelector('table.events'));
        const panel = box(doc.querySelector('aside.payload'));
        // Every cell of the first rows is the topmost element where it is drawn: nothing lies over it.
        const covered = [...doc.querySelectorAll('table.events tr')].slice(0, 12).flatMap(
          (row: any) =>
            [...row.children].filter((cell: any) => {
              const r = box(cell);
              const top = doc.elementFromPoint(r.left + r.width / 2, Math.max(1, r.top) + 4);
              return (
                r.top + 4 < (globalThis as any).innerHeight &&
                r.top >= 0 &&
                top !== null &&
                !cell.contains(top)
              );
            }).length,
        );
        return { table, panel, covered: covered.reduce((a: number, b: number) => a + b, 0) };
      });
      expect(boxes.covered).toBe(0);
      if (width === 1400) expect(boxes.table.right).toBeLessThanOrEqual(boxes.panel.left);
      else expect(boxes.panel.bottom).toBeLessThanOrEqual(boxes.table.top);
    }
  });

  it('draws a waterfall per turn whose axis spans that turn, and zooms in on it', async () => {
    const { main } = await sessions();
    const { page, errors } = await open(`#/sessions/${main}/trace`);
    await page.getByRole('tab', { name: 'Waterfall' }).click();
    const waterfall = page.getByTestId('waterfall');
    await page.getByLabel('Turn to draw').selectOption({ index: 0 });
    const bars = waterfall.locator('g.span');
    // The first turn: the turn, two model calls and the tool.
    await expect.poll(() => bars.count(), { timeout: 5_000 }).toBe(4);
    const trace = (await t.request('GET', `/sessions/${main}/trace?limit=5000`)).body.events as any[];
    const firstTurn = trace.find((e) => e.type === 'turn.started')!;
    const firstEnd = trace.find((e) => e.type === 'turn.completed' && e.parent_event_id === firstTurn.id)!;
    const window = async () =>
      (await waterfall.locator('svg').getAttribute('data-window'))!.split('-').map(Number);
    expect(await window()).toEqual([Date.parse(firstTurn.timestamp), Date.parse(firstEnd.timestamp)]);
    // The turn's bar fills the axis: from the labels' edge to the end of the bars.
    const turnBar = await bars.first().locator('rect').boundingBox();
    const svg = await waterfall.locator('svg').boundingBox();
    expect(turnBar!.width).toBeGreaterThan(svg!.width * 0.6);
    await page.getByRole('button', { name: 'Zoom in' }).click();
    const [from, to] = await window();
    expect(to! - from!).toBeLessThan(Date.parse(firstEnd.timestamp) - Date.parse(firstTurn.timestamp));
    await page.getByRole('button', { name: 'Whole turn' }).click();
    expect(await window()).toEqual([Date.parse(firstTurn.timestamp), Date.parse(firstEnd.timestamp)]);
    // The memory change of the third turn is a point on its tool's row.
    await page.getByLabel('Turn to draw').selectOption({ index: 2 });
    await expect
      .poll(() => waterfall.locator('g.span.tool [data-mark="memory.updated"]').count(), { timeout: 5_000 })
      .toBe(1);
    expect(errors).toEqual([]);
  });

  it('writes screenshots of the trace page, light and dark, at 1,400 and 900 px', async () => {
    const { main } = await sessions();
    const trace = (await t.request('GET', `/sessions/${main}/trace?limit=5000`)).body.events as any[];
    const tool = trace.find((e) => e.type === 'tool.called')!;
    await screenshotsOf(
      chromium.browser,
      t,
      'trace',
      `#/sessions/${main}/trace?event=${tool.id}`,
      async (page) => {
        await expect.poll(() => page.getByTestId('span-detail').count(), { timeout: 10_000 }).toBe(1);
      },
    );
    await screenshotsOf(chromium.browser, t, 'trace-waterfall', `#/sessions/${main}/trace`, async (page) => {
      await page.getByRole('tab', { name: 'Waterfall' }).click();
      await page.getByLabel('Turn to draw').selectOption({ index: 1 });
    });
  }, 90_000);
});
