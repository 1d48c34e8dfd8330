import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import { AttachTokens } from './attach-tokens.js';
import { AuthThrottle, type AuthThrottleOptions } from './auth-throttle.js';
import { authCookieHeader, authenticate, type Credential, queryToken } from './security.js';

/** What the gate decided: pass (with a cookie to set after a `?token=`), 401, or 429 with a wait. */
export type GateVerdict =
  | { readonly ok: true; readonly setCookie: string | null }
  | { readonly ok: false; readonly status: number; readonly code: string; readonly message: string }
  | {
      readonly ok: false;
      readonly status: 429;
      readonly code: string;
      readonly message: string;
      readonly retryAfterSeconds: number;
    };

/** Routes open without the token: they reveal nothing (docs/http-api.md "Authentication"). */
const OPEN_PATHS = new Set(['/healthz']);

const PASS: GateVerdict = { ok: true, setCookie: null };
const UNAUTHORIZED: GateVerdict = {
  ok: false,
  status: 401,
  code: 'METIS_ERR_UNAUTHORIZED',
  message: 'missing or wrong bearer token',
};

/** How long a sign-in link works if unused; each works once. */
export const LOGIN_CODE_TTL_MS = 15 * 60_000;
const MAX_UNUSED_LOGIN_CODES = 100;
/** The scope login codes are issued for (the attach-token store keys its tokens by a session id). */
const DASHBOARD = '(dashboard)';

function loginCode(request: IncomingMessage): string | null {
  const url = request.url ?? '/';
  const mark = url.indexOf('?');
  return mark < 0 ? null : new URLSearchParams(url.slice(mark + 1)).get('login');
}

/** `GET`/`HEAD` of `/` or of a file under `/assets/`: the dashboard (static-files.ts). */
function isPageFile(request: IncomingMessage): boolean {
  if (request.method !== 'GET' && request.method !== 'HEAD') return false;
  const path = pathOf(request);
  return path === '/' || path.startsWith('/assets/');
}

function pathOf(request: IncomingMessage): string {
  const url = request.url ?? '/';
  const mark = url.indexOf('?');
  return mark < 0 ? url : url.slice(0, mark);
}

/**
 * The token check of every request and upgrade, with the per-peer slow-down in front of it. The token
 * and the request's query are never logged: the warn line names the peer and its failure count only.
 */
export class AuthGate {
  private readonly throttle: AuthThrottle;
  private readonly loginCodes = new AttachTokens(LOGIN_CODE_TTL_MS, MAX_UNUSED_LOGIN_CODES);

  constructor(
    private readonly token: string | null,
    private readonly logger: Logger,
    throttle: Partial<AuthThrottleOptions> = {},
  ) {
    this.throttle = new AuthThrottle(throttle);
  }

  /** An HTTP request: open paths pass, else a header, cookie or (GET) `?token=` must carry the token. */
  check(request: IncomingMessage): GateVerdict {
    if (this.token === null) return PASS;
    if (request.method === 'GET' && OPEN_PATHS.has(pathOf(request))) return PASS;
    if (isPageFile(request)) {
      // The dashboard's page and assets hold no data: they load without the token, so a wrong or missing
      // one meets a page that says how to get in (its API calls get the 401). A sign-in link's
      // single-use `?login=` code (or a `?token=`) is traded for the cookie here.
      return this.signIn(request);
    }
    return this.decide(request, authenticate(request, this.token));
  }

  /**
   * A WebSocket upgrade: besides the credentials of `check`, a valid attach token counts, since one is
   * issued only to an authenticated `GET /sessions/{id}` (docs/decisions.md "Local token").
   */
  checkUpgrade(request: IncomingMessage, attachTokenValid: boolean): GateVerdict {
    if (this.token === null) return PASS;
    const credential = authenticate(request, this.token) ?? (attachTokenValid ? 'attach' : null);
    return this.decide(request, credential);
  }

  /**
   * A sign-in link's code for the dashboard (`/?login=…`): single use, valid LOGIN_CODE_TTL_MS, traded
   * for the token's cookie. The banner and `metis dashboard` print links with one, so the token itself
   * is never printed (a terminal's scrollback or a service log may be read by others). Null without a
   * token: the page needs no sign-in then.
   */
  issueLoginCode(): string | null {
    return this.token === null ? null : this.loginCodes.issue(DASHBOARD);
  }

  /** Seconds a peer must still wait, checked before anything single-use is spent; 0 when none. */
  retryAfter(request: IncomingMessage): number {
    return this.token === null ? 0 : this.throttle.retryAfterSeconds(peerOf(request));
  }

  /**
   * The page's sign-in: a `?token=` or `?login=` that is right sets the cookie; one that is wrong counts
   * as a failure, as anywhere else, and a peer being slowed down trades nothing (the page still loads,
   * so it can say how to get in), so the cookie cannot be used to test guesses at full speed.
   */
  private signIn(request: IncomingMessage): GateVerdict {
    const peer = peerOf(request);
    const code = loginCode(request);
    const offered = code !== null || queryToken(request) !== null;
    if (!offered || this.throttle.retryAfterSeconds(peer) > 0) return PASS;
    if (authenticate(request, this.token!) === 'query' || this.loginCodes.consume(code, DASHBOARD)) {
      this.throttle.success(peer);
      return { ok: true, setCookie: authCookieHeader(request, this.token!) };
    }
    this.failed(peer);
    return PASS;
  }

  private failed(peer: string): void {
    const outcome = this.throttle.failure(peer);
    if (outcome.logNow) {
      this.logger.warn(
        { peer, failures: outcome.failures },
        'repeated requests with a missing or wrong token: answering 429 to this peer for a while',
      );
    }
  }

  private decide(request: IncomingMessage, credential: Credential | 'attach' | null): GateVerdict {
    const peer = peerOf(request);
    const wait = this.throttle.retryAfterSeconds(peer);
    if (wait > 0) return tooMany(wait);
    if (credential !== null) {
      this.throttle.success(peer);
      return credential === 'query' ? { ok: true, setCookie: authCookieHeader(request, this.token!) } : PASS;
    }
    this.failed(peer);
    return UNAUTHORIZED;
  }
}

export function tooMany(retryAfterSeconds: number): GateVerdict {
  return {
    ok: false,
    status: 429,
    code: 'METIS_ERR_TOO_MANY_ATTEMPTS',
    message: `too many requests with a wrong token: retry after ${retryAfterSeconds} s`,
    retryAfterSeconds,
  };
}

function peerOf(request: IncomingMessage): string {
  return request.socket.remoteAddress ?? 'unknown';
}
