import { z } from 'zod';
import { type AuthGate, LOGIN_CODE_TTL_MS } from '../http/auth-gate.js';
import { sendError, sendJson } from '../http/http-util.js';
import { jsonRoute, type Route, rawRoute } from '../http/routes.js';

const SignInBody = z
  .strictObject({
    login: z.string().min(1).max(200).optional().describe('the code of a sign-in link (`/?login=…`)'),
    token: z.string().min(1).max(1000).optional().describe("the server's token itself"),
  })
  .refine((offer) => (offer.login === undefined) !== (offer.token === undefined), {
    message: 'give exactly one of login and token',
  });

const SignInLinkAnswer = z.object({
  url: z.string().describe('the dashboard, with a single-use ?login= code'),
  expires_in_seconds: z.number(),
});

const SignInAnswer = z.object({
  access_key: z.string().nullable().describe('null when the server has no token'),
  token_type: z.literal('Bearer'),
});

/**
 * How the dashboard gets in (docs/decisions.md "A cookie alone authorizes nothing"): `metis dashboard`
 * (or the serve banner) asks for a sign-in link, and the page trades the link's single-use code for the
 * access key it then sends as `Authorization: Bearer` from its own origin's storage.
 */
export function dashboardAuthRoutes(gate: AuthGate, signInLink: () => string): Route[] {
  return [
    jsonRoute(
      {
        method: 'POST',
        path: '/dashboard/sign-in-link',
        summary: 'A fresh single-use sign-in link to the dashboard (what `metis dashboard` prints)',
        success: { status: 201, description: 'url, expires_in_seconds', schema: SignInLinkAnswer },
        errors: [],
      },
      async () => [201, { url: signInLink(), expires_in_seconds: LOGIN_CODE_TTL_MS / 1000 }],
    ),
    rawRoute(
      {
        method: 'POST',
        path: '/dashboard/sign-in',
        summary:
          "Trades a sign-in link's code (or the token) for the dashboard's access key, sent as `Authorization: Bearer` (null when the server has no token)",
        body: SignInBody,
        success: { status: 200, description: 'access_key, token_type', schema: SignInAnswer },
        errors: ['METIS_ERR_TOO_MANY_ATTEMPTS'],
        open: true,
      },
      async ({ request, body }, response) => {
        const verdict = gate.signIn(request, body);
        if ('key' in verdict)
          return sendJson(response, 200, { access_key: verdict.key, token_type: 'Bearer' });
        if (verdict.ok) throw new Error('a sign-in passed without a key');
        const wait: Record<string, string> =
          'retryAfterSeconds' in verdict ? { 'retry-after': String(verdict.retryAfterSeconds) } : {};
        sendError(response, verdict.status, verdict.code, verdict.message, wait);
      },
    ),
  ];
}
