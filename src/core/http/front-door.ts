import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AuthGate, GateVerdict } from './auth-gate.js';
import { allowOrigin, answerPreflight } from './cors.js';
import { checkRequest, isListedOrigin, type SecurityOptions } from './security.js';

/**
 * What every HTTP request passes before a route sees it: the Host and Origin checks, a CORS preflight
 * answered here, then the credential. Returns whether the request goes on; otherwise it was answered.
 */
export function frontDoor(
  security: SecurityOptions,
  gate: AuthGate,
): (request: IncomingMessage, response: ServerResponse) => boolean {
  return (request, response) => {
    const verdict = checkRequest(request, security);
    const listed = request.headers.origin !== undefined && isListedOrigin(request.headers.origin, security);
    if (verdict.ok && answerPreflight(request, response, listed)) return false;
    if (verdict.ok) allowOrigin(request, response, listed);
    const auth: GateVerdict = !verdict.ok ? verdict : gate.check(request);
    if (!auth.ok) {
      response.writeHead(auth.status, {
        'content-type': 'application/json',
        ...('retryAfterSeconds' in auth ? { 'retry-after': String(auth.retryAfterSeconds) } : {}),
      });
      response.end(JSON.stringify({ error: { code: auth.code, message: auth.message } }));
      return false;
    }
    return true;
  };
}
