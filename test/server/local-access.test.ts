import { describe, expect, it } from 'vitest';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { startTestServer, upgradeStatus } from '../helpers/server.js';

/**
 * Issue 13, observations 2 and 4, against a real server on port 0: repeated wrong tokens are slowed
 * down per peer (a right token always passes: issue 34), and `?token=` authenticates a GET.
 */

const TOKEN = 'local-access-test-token-0123456789';

describe('401 flood from one peer', () => {
  it('answers its failures 429 METIS_ERR_TOO_MANY_ATTEMPTS with Retry-After until the pause ends; a good token always passes', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const wrong = { authorization: 'Bearer not-the-token-0123456789' };
    const good = { authorization: `Bearer ${TOKEN}` };
    const statuses: number[] = [];
    for (let i = 0; i < 5; i += 1)
      statuses.push((await t.request('GET', '/sessions', undefined, wrong)).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401]);

    const slowed = await fetch(`${t.url}/sessions`, {
      headers: { authorization: 'Bearer other-wrong-0123456789' },
    });
    expect(slowed.status).toBe(429);
    const retryAfter = Number(slowed.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(((await slowed.json()) as any).error.code).toBe('METIS_ERR_TOO_MANY_ATTEMPTS');
    expect((await t.request('GET', '/sessions', undefined, good)).status).toBe(200);
    // An upgrade with no valid attach token is slowed the same way.
    expect(await upgradeStatus(`${t.url.replace('http', 'ws')}/sessions/x/stream?attach=atk_x`)).toBe(429);

    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 200));
    expect((await t.request('GET', '/sessions', undefined, wrong)).status).toBe(401);
  }, 20_000);

  it('doubles the pause when the peer keeps failing after it', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN, authThrottle: { baseDelayMs: 300 } });
    const wrong = { authorization: 'Bearer wrong-wrong-wrong-wrong' };
    for (let i = 0; i < 5; i += 1) await t.request('GET', '/sessions', undefined, wrong);
    expect((await t.request('GET', '/sessions', undefined, wrong)).status).toBe(429);
    await new Promise((resolve) => setTimeout(resolve, 450));
    // The first pause (300 ms) is over; this failure starts the next one, twice as long.
    expect((await t.request('GET', '/sessions', undefined, wrong)).status).toBe(401);
    await new Promise((resolve) => setTimeout(resolve, 350));
    expect((await t.request('GET', '/sessions', undefined, wrong)).status).toBe(429);
  }, 20_000);

  it('logs one warn line per episode with the peer and the count, never the token or the query', async () => {
    const logs = captureLogs();
    const t = await startTestServer({}, { bearerToken: TOKEN, logger: logs.logger });
    const guess = 'guessed-token-0123456789abcdef';
    for (let i = 0; i < 8; i += 1) await fetch(`${t.url}/sessions?token=${guess}`);
    await settleLogs();
    const warned = logs.at(LEVEL.warn);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ peer: expect.stringContaining('127.0.0.1'), failures: 5 });
    const everything = JSON.stringify(logs.records);
    expect(everything).not.toContain(guess);
    expect(everything).not.toContain(TOKEN);
  });
});

describe('query tokens for clients that cannot set headers', () => {
  it('GET ?token= authenticates that request and sets no cookie; a cookie never authenticates', async () => {
    const t = await startTestServer({}, { bearerToken: TOKEN });
    const read = await fetch(`${t.url}/sessions?token=${TOKEN}`);
    expect(read.status).toBe(200);
    expect(read.headers.get('set-cookie')).toBeNull();
    // The query token works on GET only.
    const posted = await fetch(`${t.url}/sessions?token=${TOKEN}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ workspace_path: t.workspace }),
    });
    expect(posted.status).toBe(401);
    const refused = await fetch(`${t.url}/sessions?token=wrong-token-0123456789`);
    expect(refused.status).toBe(401);
    expect(
      (await t.request('GET', '/sessions', undefined, { cookie: `metis_token_${t.server.port}=${TOKEN}` }))
        .status,
    ).toBe(401);
  });
});
