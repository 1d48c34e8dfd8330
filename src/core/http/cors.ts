import type { IncomingMessage, ServerResponse } from 'node:http';

const ALLOWED_HEADERS = 'authorization, content-type, last-event-id';
const EXPOSED_HEADERS = 'x-vercel-ai-ui-message-stream, retry-after';
/** How long a browser may cache a preflight answer. */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/**
 * CORS for a request whose `Origin` already passed the origin check (loopback, or in
 * `server.allowed_origins`; any other is refused 403 before this): the browser may read the answer.
 * The origin is echoed, never `*`. Only a listed origin may send the token cookie (credentials): any
 * local page is a loopback origin, and must then bring the token itself, in the Authorization header.
 */
export function allowOrigin(request: IncomingMessage, response: ServerResponse, listed: boolean): void {
  const origin = request.headers.origin;
  if (origin === undefined) return;
  response.setHeader('access-control-allow-origin', origin);
  if (listed) response.setHeader('access-control-allow-credentials', 'true');
  response.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
  response.setHeader('vary', 'Origin');
}

/**
 * Answers a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) of an allowed origin:
 * 204 with the methods and headers the API takes. A preflight carries no credentials, so it is
 * answered before the token check; the request that follows is checked as any other. False when the
 * request is not a preflight.
 */
export function answerPreflight(
  request: IncomingMessage,
  response: ServerResponse,
  listed: boolean,
): boolean {
  if (request.method !== 'OPTIONS' || request.headers['access-control-request-method'] === undefined)
    return false;
  allowOrigin(request, response, listed);
  response.writeHead(204, {
    'access-control-allow-methods': 'GET, POST, PUT, PATCH, DELETE, OPTIONS',
    'access-control-allow-headers': ALLOWED_HEADERS,
    'access-control-max-age': String(PREFLIGHT_MAX_AGE_SECONDS),
  });
  response.end();
  return true;
}
