import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** Host names that point at this machine; anything else in `Host` may be a DNS rebinding attack. */
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);

export interface SecurityOptions {
  /** Origins allowed besides the loopback ones, e.g. a dashboard served elsewhere. */
  readonly allowedOrigins: readonly string[];
  /** Required on every request when set (always set for a non-loopback bind). */
  readonly bearerToken: string | null;
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

/** `https://dash.example/` and `https://dash.example` are one origin: compare the normalized form. */
function normalizeOrigin(origin: string): string {
  try {
    return new URL(origin).origin;
  } catch {
    return origin;
  }
}

function isAllowedOrigin(origin: string, options: SecurityOptions): boolean {
  if (options.allowedOrigins.some((allowed) => normalizeOrigin(allowed) === normalizeOrigin(origin)))
    return true;
  try {
    const url = new URL(origin);
    return (url.protocol === 'http:' || url.protocol === 'https:') && isLoopbackHost(url.host);
  } catch {
    return false;
  }
}

function tokenMatches(header: string | undefined, expected: string): boolean {
  if (!header?.startsWith('Bearer ')) return false;
  const given = Buffer.from(header.slice(7));
  const wanted = Buffer.from(expected);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

/**
 * Checks every request and WebSocket upgrade (DESIGN.md security defaults): a loopback `Host` (DNS
 * rebinding), an absent or local `Origin` (cross-site WebSocket hijacking), and the bearer token when
 * one is configured.
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
  if (options.bearerToken !== null && !tokenMatches(request.headers.authorization, options.bearerToken)) {
    return {
      ok: false,
      status: 401,
      code: 'METIS_ERR_UNAUTHORIZED',
      message: 'missing or wrong bearer token',
    };
  }
  return { ok: true };
}
