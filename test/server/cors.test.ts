import { describe, expect, it } from 'vitest';
import { startTestServer } from '../helpers/server.js';

/** Issue 15: CORS for browser pages on the allowed origins; every other origin is refused by name. */

describe('CORS', () => {
  it('answers the preflight of an allowed origin, echoes it on the answer, and refuses others with 403', async () => {
    const t = await startTestServer({}, { allowedOrigins: ['https://app.example'] });
    const preflight = await fetch(`${t.url}/api/chat`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://app.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')).toContain('content-type');
    expect(preflight.headers.get('access-control-allow-headers')).toContain('last-event-id');

    const sessions = await fetch(`${t.url}/sessions`, { headers: { origin: 'https://app.example' } });
    expect(sessions.status).toBe(200);
    expect(sessions.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(sessions.headers.get('vary')).toBe('Origin');
    // A loopback page (a dev server on another port) is a local origin: allowed too.
    expect(sessions.headers.get('access-control-allow-credentials')).toBe('true');
    const local = await fetch(`${t.url}/sessions`, { headers: { origin: 'http://localhost:3000' } });
    expect(local.headers.get('access-control-allow-origin')).toBe('http://localhost:3000');
    expect(local.headers.get('access-control-allow-credentials')).toBeNull();

    const elsewhere = await fetch(`${t.url}/api/chat`, {
      method: 'OPTIONS',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
    });
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.headers.get('access-control-allow-origin')).toBeNull();
    expect(((await elsewhere.json()) as { error: unknown }).error).toEqual({
      code: 'METIS_ERR_FORBIDDEN_ORIGIN',
      message: 'origin https://evil.example is not allowed',
    });
    const plain = await fetch(`${t.url}/sessions`);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
  });
});
