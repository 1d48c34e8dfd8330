import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 16: what the dashboard reads (session activity, a session's trace, the store's figures, the
 * models) and how a browser signs in (a single-use link traded for an access key; the page itself open).
 */
const TOKEN = 'dashboard-api-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };

function dashboardFolder(): string {
  const root = mkdtempSync(join(tmpdir(), 'metis-page-'));
  writeFileSync(join(root, 'index.html'), '<!doctype html><title>metis</title>');
  return root;
}

describe('what the dashboard reads', () => {
  it('GET /sessions gives each session its turns, cost, last activity and running turn', async () => {
    const t = await startTestServer();
    const idle = await t.createSession();
    const busy = await t.createSession();
    await t.submit(busy, 'hello');
    await t.submit(busy, 'hello again').catch(() => undefined);
    await t.runtime.currentTurn(busy)?.done;
    await t.context.flush();
    const { body } = await t.request('GET', '/sessions');
    const byId = new Map(body.sessions.map((s: any) => [s.id, s]));
    const stored = t.context.store.sessionEvents(busy);
    const calls = stored.filter((e) => e.type === 'llm.call_completed');
    expect(byId.get(busy)).toMatchObject({
      turn_count: stored.filter((e) => e.type === 'turn.started').length,
      current_turn_id: null,
      last_activity_at: stored.at(-1)!.timestamp.slice(0, 23) + 'Z',
    });
    expect((byId.get(busy) as any).cost_usd).toBeCloseTo(
      calls.reduce((sum, e) => sum + (e.payload as { cost_usd: number }).cost_usd, 0),
      12,
    );
    expect((byId.get(busy) as any).turn_count).toBeGreaterThanOrEqual(1);
    expect(byId.get(idle)).toMatchObject({ turn_count: 0, cost_usd: 0 });
  });

  it("GET /sessions/{id}/trace pages through a session's stored events, its workers' on request", async () => {
    const t = await startTestServer();
    const sessionId = await t.createSession();
    await t.submit(sessionId, 'delegate: count the files');
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    const own = t.context.store.sessionEvents(sessionId);
    const first = await t.request('GET', `/sessions/${sessionId}/trace?limit=3`);
    expect(first.status).toBe(200);
    expect(first.body.events.map((e: any) => e.id)).toEqual(own.slice(0, 3).map((e) => e.id));
    expect(first.body.has_more).toBe(true);
    const rest = await t.request('GET', `/sessions/${sessionId}/trace?after=${own[2]!.id}`);
    expect(rest.body.events.map((e: any) => e.id)).toEqual(own.slice(3).map((e) => e.id));
    expect(rest.body.has_more).toBe(false);
    const withWorkers = await t.request('GET', `/sessions/${sessionId}/trace?include_worker_sessions=true`);
    const sessions = new Set(withWorkers.body.events.map((e: any) => e.session_id));
    expect(sessions.size).toBe(2);
    const ids = withWorkers.body.events.map((e: any) => e.id);
    expect(ids).toEqual([...ids].sort());
    expect((await t.request('GET', '/sessions/sess_nope/trace')).status).toBe(404);
    const bad = await t.request('GET', `/sessions/${sessionId}/trace?after=nope`);
    expect(bad).toMatchObject({ status: 400, body: { error: { code: 'METIS_ERR_INVALID_ARGUMENT' } } });
    expect(bad.body.error.message).toMatch(/^after: /);
  });

  it('GET /store/stats reports what `trace stats` does, the retention, and 48 hours of events per hour', async () => {
    const t = await startTestServer({}, { stream: { retentionDays: 30 } });
    const sessionId = await t.createSession();
    await t.submit(sessionId, 'hello');
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    const { status, body } = await t.request('GET', '/store/stats');
    expect(status).toBe(200);
    const count = (t.context.db.prepare('SELECT count(*) FROM events').pluck().get() as number) ?? 0;
    expect(body).toMatchObject({
      event_count: count,
      retention_days: 30,
      schema_version: expect.any(Number),
    });
    expect(body.by_hour).toHaveLength(48);
    expect(body.by_hour.reduce((sum: number, h: any) => sum + h.count, 0)).toBe(count);
    expect(body.by_hour.at(-1).hour).toBe(new Date().toISOString().slice(0, 13));
    expect(body.by_type.find((row: any) => row.type === 'turn.started').count).toBe(1);
  });

  it('GET /models lists the configured models this server can serve', async () => {
    const t = await startTestServer({
      default_model: 'scripted:demo',
      routing_rules: [{ name: 'code', match: 'code', model: 'scripted:coder' }],
      pricing: {
        'nowhere:big': {
          input_per_mtok: 1,
          output_per_mtok: 1,
          cached_input_per_mtok: 0,
          cache_creation_per_mtok: 0,
        },
      },
    });
    const { body } = await t.request('GET', '/models');
    expect(body.default_model).toBe('scripted:demo');
    expect(body.models).toEqual(expect.arrayContaining(['scripted:demo', 'scripted:coder', 'scripted:fast']));
    expect(body.models).not.toContain('nowhere:big');
  });
});

describe('signing a browser in', () => {
  it('serves the page without the token, and trades a sign-in link for the access key once', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN, staticRoot: dashboardFolder() });
    const page = await fetch(`${t.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('set-cookie')).toBeNull();
    expect((await fetch(`${t.url}/sessions`)).status).toBe(401);

    const minted = await t.request('POST', '/dashboard/sign-in-link', undefined, AUTH);
    expect(minted.status).toBe(201);
    expect(minted.body.url).toMatch(new RegExp(`^${t.url}/\\?login=atk_`));
    expect(minted.body.url).not.toContain(TOKEN);
    const code = new URL(minted.body.url).searchParams.get('login')!;
    // Loading the page spends nothing: the page's own script trades the code.
    expect((await fetch(minted.body.url)).headers.get('set-cookie')).toBeNull();
    const first = await t.request('POST', '/dashboard/sign-in', { login: code });
    expect(first.status).toBe(200);
    expect(first.body.access_key).not.toContain(TOKEN);
    const withKey = await t.request('GET', '/sessions', undefined, {
      authorization: `Bearer ${first.body.access_key}`,
    });
    expect(withKey.status).toBe(200);
    // Once only.
    expect((await t.request('POST', '/dashboard/sign-in', { login: code })).status).toBe(401);
    // A link is for the page: elsewhere it is no credential.
    const other = await t.request('POST', '/dashboard/sign-in-link', undefined, AUTH);
    const otherCode = new URL(other.body.url).searchParams.get('login');
    expect((await fetch(`${t.url}/sessions?login=${otherCode}`)).status).toBe(401);
    expect((await t.request('POST', '/dashboard/sign-in-link')).status).toBe(401);
    expect(t.server.signInLink()).toMatch(/\/\?login=atk_/);
  });

  it('counts wrong tokens and codes offered to the sign-in as failures: a guesser is slowed down there too', async () => {
    const t = await startTestServer(
      {},
      {
        bearerToken: TOKEN,
        staticRoot: dashboardFolder(),
        authThrottle: { maxFailures: 3, baseDelayMs: 60_000 },
      },
    );
    const offers = [
      { token: 'wrong-guess-0-0123456789' },
      { login: 'atk_guess' },
      { token: 'wrong-guess-2-0123456789' },
    ];
    for (const offer of offers)
      expect((await t.request('POST', '/dashboard/sign-in', offer)).status).toBe(401);
    // Slowed down now: a wrong offer is answered 429, and so is a wrong token on the API...
    const slowed = await t.request('POST', '/dashboard/sign-in', { login: 'atk_another' });
    expect(slowed.status).toBe(429);
    expect((await fetch(`${t.url}/sessions`)).status).toBe(429);
    // ...but the right token still passes, and still trades.
    expect((await fetch(`${t.url}/sessions`, { headers: AUTH })).status).toBe(200);
    expect((await t.request('POST', '/dashboard/sign-in', { token: TOKEN })).status).toBe(200);
  });

  it('gives a plain link when the server has no token', async () => {
    const t = await startTestServer({}, { staticRoot: dashboardFolder() });
    expect(t.server.signInLink()).toBe(`${t.url}/`);
  });
});
