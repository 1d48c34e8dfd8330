import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { startTestServer, type TestServer, upgradeStatus } from '../helpers/server.js';

/**
 * Issue 34, observations 2, 4 and 5, against a real server on port 0: what a page on another port of
 * this host, or a process sending wrong tokens, could do with the owner's server.
 */

const TOKEN = 'ways-in-test-token-0123456789abcdef';
const WRONG = { authorization: 'Bearer not-the-token-0123456789' };
const GOOD = { authorization: `Bearer ${TOKEN}` };

/** The cookie earlier servers set for the dashboard: what a listener on another port could read. */
const OLD_COOKIE_VALUE = createHmac('sha256', TOKEN).update('metis auth cookie v1').digest('base64url');

async function signIn(t: TestServer, offer: Record<string, string>) {
  const response = await fetch(`${t.url}/dashboard/sign-in`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(offer),
  });
  return { status: response.status, body: (await response.json()) as any, headers: response.headers };
}

describe('a cookie alone authorizes nothing (observation 2)', () => {
  it('no answer sets a cookie, and a replayed dashboard cookie neither reads nor changes', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN, authThrottle: { maxFailures: 100 } });
    const link = await t.request('POST', '/dashboard/sign-in-link', undefined, GOOD);
    const code = new URL(link.body.url).searchParams.get('login')!;
    // The page load a sign-in link makes, as on earlier servers (which set the cookie here).
    for (const visit of [`/?login=${code}`, `/?token=${TOKEN}`, `/sessions?token=${TOKEN}`])
      expect((await fetch(`${t.url}${visit}`)).headers.get('set-cookie'), visit).toBeNull();

    for (const cookie of [`metis_token_${t.server.port}=${OLD_COOKIE_VALUE}`, `metis_token=${TOKEN}`]) {
      expect((await t.request('GET', '/sessions', undefined, { cookie })).status).toBe(401);
      const created = await t.request('POST', '/sessions', { workspace_path: t.workspace }, { cookie });
      expect(created.status).toBe(401);
      expect((await t.request('POST', '/patterns/clear', undefined, { cookie })).status).toBe(401);
    }
    expect((await t.request('GET', '/sessions', undefined, GOOD)).body.sessions).toHaveLength(0);
  });

  it("trades a sign-in link's code, once, for an access key that reads, changes and attaches", async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const link = await t.request('POST', '/dashboard/sign-in-link', undefined, GOOD);
    const code = new URL(link.body.url).searchParams.get('login')!;
    const traded = await signIn(t, { login: code });
    expect(traded.status).toBe(200);
    expect(traded.headers.get('set-cookie')).toBeNull();
    const key = traded.body.access_key as string;
    expect(key).not.toContain(TOKEN);
    expect((await signIn(t, { login: code })).status).toBe(401); // spent

    const asPage = { authorization: `Bearer ${key}` };
    const created = await t.request('POST', '/sessions', { workspace_path: t.workspace }, asPage);
    expect(created.status).toBe(201);
    const handshake = await t.request('GET', `/sessions/${created.body.session_id}`, undefined, asPage);
    expect(handshake.status).toBe(200);
    expect(await upgradeStatus(handshake.body.ws_url)).toBe(101);
    // The token itself trades too (a `/?token=` link); a wrong one does not.
    expect((await signIn(t, { token: TOKEN })).body.access_key).toBe(key);
    expect((await signIn(t, { token: 'wrong-token-0123456789abcdef' })).status).toBe(401);
    expect((await signIn(t, { login: code, token: TOKEN })).status).toBe(400);
  });

  it('the sign-in answers a null key when the server has no token', async () => {
    const t = await startTestServer();
    expect((await signIn(t, { login: 'anything' })).body).toEqual({ access_key: null, token_type: 'Bearer' });
  });
});

describe('failures are throttled, never the right token (observation 4)', () => {
  it('the owner is answered while a local process sends bursts of wrong tokens', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const owner: number[] = [];
    const attacker: number[] = [];
    for (let round = 0; round < 22; round += 1) {
      for (let i = 0; i < 6; i += 1)
        attacker.push((await t.request('GET', '/sessions', undefined, WRONG)).status);
      owner.push((await t.request('GET', '/sessions', undefined, GOOD)).status);
    }
    expect(owner).toEqual(Array(22).fill(200));
    expect(attacker).toContain(429);
    expect(new Set(attacker)).toEqual(new Set([401, 429]));
  }, 20_000);

  it('the owner is answered while a page loads images with no token (no Origin on images)', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const owner: number[] = [];
    for (let round = 0; round < 20; round += 1) {
      for (let i = 0; i < 6; i += 1)
        await fetch(`${t.url}/sessions/x/events`, { headers: { accept: 'image/*' } });
      owner.push((await t.request('GET', '/sessions', undefined, GOOD)).status);
    }
    expect(owner).toEqual(Array(20).fill(200));
    expect((await fetch(`${t.url}/sessions`)).status).toBe(429);
  }, 20_000);

  it('a valid attach token opens the stream while its address is slowed down', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const session = (await t.request('POST', '/sessions', { workspace_path: t.workspace }, GOOD)).body
      .session_id;
    const handshake = await t.request('GET', `/sessions/${session}`, undefined, GOOD);
    for (let i = 0; i < 6; i += 1) await t.request('GET', '/sessions', undefined, WRONG);
    expect((await t.request('GET', '/sessions', undefined, WRONG)).status).toBe(429);
    expect(await upgradeStatus(handshake.body.ws_url)).toBe(101);
    expect(
      await upgradeStatus(`${t.url.replace('http', 'ws')}/sessions/${session}/stream?attach=atk_x`),
    ).toBe(429);
  });

  it('behind a trusted proxy each client is counted apart, and a wrong secret is slowed wherever it comes from', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN, trustedProxies: ['127.0.0.1', '::1'] });
    const from = (client: string, auth: Record<string, string>) =>
      t.request('GET', '/sessions', undefined, { ...auth, 'x-forwarded-for': `203.0.113.9, ${client}` });
    const first: number[] = [];
    for (let i = 0; i < 6; i += 1) first.push((await from('10.0.0.1', WRONG)).status);
    expect(first.at(-1)).toBe(429);
    // Another client behind the same proxy, with another wrong token: a plain 401, not 429.
    expect((await from('10.0.0.2', { authorization: 'Bearer another-wrong-token-01234' })).status).toBe(401);
    // The first client's wrong token is slowed from any address; the owner passes from every one.
    expect((await from('10.0.0.3', WRONG)).status).toBe(429);
    expect((await from('10.0.0.1', GOOD)).status).toBe(200);
    expect((await from('10.0.0.2', GOOD)).status).toBe(200);
  });

  it('without trusted proxies a forged X-Forwarded-For escapes nothing', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    for (let i = 0; i < 6; i += 1)
      await t.request('GET', '/sessions', undefined, { authorization: `Bearer wrong-${i}-0123456789abcdef` });
    const forged = await t.request('GET', '/sessions', undefined, {
      authorization: 'Bearer yet-another-wrong-token-0123',
      'x-forwarded-for': '10.9.9.9',
    });
    expect(forged.status).toBe(429);
  });
});

describe('a change needs what only a preflighted request carries (observation 5)', () => {
  /** What a `<form method=POST>` on http://127.0.0.1:<other port> sends. */
  const FORM = {
    'content-type': 'application/x-www-form-urlencoded',
    origin: 'http://127.0.0.1:1',
  };

  it('a form post is refused 415 and changes nothing, on a server with no token', async () => {
    const t = await startTestServer();
    const session = await t.createSession();
    for (const path of [
      '/patterns/clear',
      `/sessions/${session}/route/override`,
      `/sessions/${session}/route/dismiss`,
      '/dashboard/sign-in-link',
      `/sessions/${session}/end`,
    ]) {
      for (const headers of [
        FORM,
        { ...FORM, 'content-type': 'text/plain' },
        { origin: FORM.origin } as Record<string, string>,
      ]) {
        const response = await fetch(`${t.url}${path}`, { method: 'POST', headers, body: 'a=b' });
        expect(response.status, `${path} ${headers['content-type']}`).toBe(415);
        expect(((await response.json()) as any).error.code).toBe('METIS_ERR_UNSUPPORTED_MEDIA_TYPE');
      }
    }
    const listed = await t.request('GET', '/sessions');
    expect(listed.body.sessions.find((s: { id: string }) => s.id === session).status).toBe('active');
  });

  it('a body-less change with a JSON content type, or with the Authorization header, still runs', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const json = await fetch(`${t.url}/patterns/clear`, {
      method: 'POST',
      headers: { ...GOOD, 'content-type': 'application/json' },
    });
    expect(json.status).toBe(200);
    const bare = await fetch(`${t.url}/patterns/clear`, { method: 'POST', headers: GOOD });
    expect(bare.status).toBe(200);
  });
});
