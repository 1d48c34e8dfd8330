import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
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

/** Compares digests, so neither the content nor the length of the secret shows in the time taken. */
function sameSecret(given: string, expected: string): boolean {
  return timingSafeEqual(
    createHash('sha256').update(given).digest(),
    createHash('sha256').update(expected).digest(),
  );
}

/**
 * The dashboard's access key: what the page holds (in its origin's `localStorage`) and sends as
 * `Authorization: Bearer`, traded for a sign-in code by `POST /dashboard/sign-in`. Derived from the
 * token, so it outlives a restart and dies with the token, and a leak of the page's storage is not the
 * token itself. Never a cookie: browsers send a cookie to every port of a host, so any listener on
 * another port of 127.0.0.1 could read it and replay it (docs/decisions.md "A cookie alone authorizes
 * nothing").
 */
export function dashboardAccessKey(token: string): string {
  if (lastKey?.token !== token)
    lastKey = {
      token,
      key: `mdk_${createHmac('sha256', token).update('metis dashboard access key v2').digest('base64url')}`,
    };
  return lastKey.key;
}

/** A server has one token: its key is derived once, not per request. */
let lastKey: { token: string; key: string } | null = null;

export function queryToken(request: IncomingMessage): string | null {
  const url = request.url ?? '/';
  const mark = url.indexOf('?');
  if (mark < 0) return null;
  return new URLSearchParams(url.slice(mark + 1)).get('token');
}

/** How a request proved it holds the token. */
export type Credential = 'header' | 'query';

/** The secret a request presents, whether right or wrong: the header's, else (GET only) the query's. */
export function presentedSecret(request: IncomingMessage): string | null {
  const header = request.headers.authorization;
  if (header?.startsWith('Bearer ')) return header.slice(7);
  return request.method === 'GET' ? queryToken(request) : null;
}

/** Whether `given` is the token or the dashboard's key derived from it, compared in constant time. */
export function isTokenOrAccessKey(given: string, token: string): boolean {
  // Both compared, always: which one matched must not show in the time taken.
  const isToken = sameSecret(given, token);
  const isKey = sameSecret(given, dashboardAccessKey(token));
  return isToken || isKey;
}

/**
 * Which credential of the request carries the token: `Authorization: Bearer` (the token, or the
 * dashboard's access key), or (GET only, for an `EventSource` or a link, which cannot set headers) a
 * `?token=` query parameter. Null when none does. A cookie is never one.
 */
export function authenticate(request: IncomingMessage, token: string): Credential | null {
  const header = request.headers.authorization;
  if (header?.startsWith('Bearer ') && isTokenOrAccessKey(header.slice(7), token)) return 'header';
  const fromQuery = request.method === 'GET' ? queryToken(request) : null;
  if (fromQuery !== null && sameSecret(fromQuery, token)) return 'query';
  return null;
}

/** Methods a browser sends from any page without asking first (a form, an image): they change nothing here. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * A request that changes something must be one a browser sends only after a CORS preflight: with a JSON
 * content type, or with an `Authorization` header. A `<form method=POST>` can send neither, so a page
 * on another port of this host (same site for the browser) cannot make one (issue 34, observation 5).
 * An empty body with `Content-Type: application/json` is fine.
 */
export function checkChangeRequest(request: IncomingMessage): SecurityVerdict {
  if (SAFE_METHODS.has(request.method ?? 'GET')) return { ok: true };
  if (request.headers.authorization !== undefined) return { ok: true };
  if (/^application\/json\s*(;|$)/i.test(request.headers['content-type'] ?? '')) return { ok: true };
  return {
    ok: false,
    status: 415,
    code: 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE',
    message: `${request.method} needs Content-Type: application/json (an empty body is fine) or an Authorization header`,
  };
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
