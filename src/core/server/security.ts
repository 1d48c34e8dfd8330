import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** Host names that point at this machine; anything else in `Host` may be a DNS rebinding attack. */
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);

export interface SecurityOptions {
  /** Origins allowed besides the loopback ones, e.g. a dashboard served elsewhere. */
  readonly allowedOrigins: readonly string[];
  /** Whether the server listens on a loopback address only; then `Host` must be a loopback name. */
  readonly loopbackOnly: boolean;
}

export type SecurityVerdict = { ok: true } | { ok: false; status: number; code: string; message: string };

function hostName(host: string): string {
  if (host.startsWith('[')) return host.slice(0, host.indexOf(']') + 1).toLowerCase();
  const colon = host.lastIndexOf(':');
  return (colon > 0 ? host.slice(0, colon) : host).toLowerCase();
}

export function isLoopbackHost(host: string): boolean {
  const name = hostName(host);
  return LOOPBACK_HOSTS.has(name) || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name);
}

/** Whether a bind address (`127.0.0.1`, `::1`, `localhost`, `0.0.0.0`...) is loopback only. */
export function isLoopbackBind(host: string): boolean {
  return isLoopbackHost(host.includes(':') && !host.startsWith('[') ? `[${host}]` : host);
}

/** `https://dash.example/` and `https://dash.example` are one origin: compare the normalized form. */
function normalizeOrigin(origin: string): string {
  try {
    return new URL(origin).origin;
  } catch {
    return origin;
  }
}

/** Whether the origin is listed in `server.allowed_origins` (not merely a loopback origin). */
export function isListedOrigin(origin: string, options: SecurityOptions): boolean {
  return options.allowedOrigins.some((allowed) => normalizeOrigin(allowed) === normalizeOrigin(origin));
}

function isAllowedOrigin(origin: string, options: SecurityOptions): boolean {
  if (isListedOrigin(origin, options)) return true;
  try {
    const url = new URL(origin);
    return (url.protocol === 'http:' || url.protocol === 'https:') && isLoopbackHost(url.host);
  } catch {
    return false;
  }
}

function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * The cookie a browser gets for `?token=`: named after the port, so two servers on one host keep
 * their own, and holding a value derived from the token, so a leaked cookie is not the bearer token.
 */
export function authCookieName(port: number): string {
  return `metis_token_${port}`;
}

export function authCookieValue(token: string): string {
  return createHmac('sha256', token).update('metis auth cookie v1').digest('base64url');
}

function cookieFrom(request: IncomingMessage, name: string): string | undefined {
  const header = request.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function queryToken(request: IncomingMessage): string | null {
  const url = request.url ?? '/';
  const mark = url.indexOf('?');
  if (mark < 0) return null;
  return new URLSearchParams(url.slice(mark + 1)).get('token');
}

/** How a request proved it holds the token; `query` asks the caller to set the cookie. */
export type Credential = 'header' | 'cookie' | 'query';

/**
 * Which credential of the request carries the token: `Authorization: Bearer`, the port's cookie, or
 * (GET only, for browsers, which cannot set headers) a `?token=` query parameter. Null when none does.
 */
export function authenticate(request: IncomingMessage, token: string): Credential | null {
  const header = request.headers.authorization;
  if (header?.startsWith('Bearer ') && sameSecret(header.slice(7), token)) return 'header';
  const cookie = cookieFrom(request, authCookieName(request.socket.localPort ?? 0));
  if (cookie !== undefined && sameSecret(cookie, authCookieValue(token))) return 'cookie';
  const fromQuery = request.method === 'GET' ? queryToken(request) : null;
  if (fromQuery !== null && sameSecret(fromQuery, token)) return 'query';
  return null;
}

/** The `Set-Cookie` value that trades a `?token=` for a cookie. */
export function authCookieHeader(request: IncomingMessage, token: string): string {
  const name = authCookieName(request.socket.localPort ?? 0);
  return `${name}=${authCookieValue(token)}; HttpOnly; SameSite=Strict; Path=/`;
}

/**
 * Checks every request and WebSocket upgrade (DESIGN.md security defaults): a loopback `Host` (DNS
 * rebinding) and an absent or local `Origin` (cross-site WebSocket hijacking). The token is checked
 * apart (`authenticate`), since an upgrade may carry an attach token instead.
 */
export function checkRequest(request: IncomingMessage, options: SecurityOptions): SecurityVerdict {
  const host = request.headers.host;
  if (options.loopbackOnly && (!host || !isLoopbackHost(host))) {
    return {
      ok: false,
      status: 403,
      code: 'METIS_ERR_FORBIDDEN_HOST',
      message: 'Host header is not a loopback name',
    };
  }
  const origin = request.headers.origin;
  if (origin !== undefined && !isAllowedOrigin(origin, options)) {
    return {
      ok: false,
      status: 403,
      code: 'METIS_ERR_FORBIDDEN_ORIGIN',
      message: `origin ${origin} is not allowed`,
    };
  }
  return { ok: true };
}
