import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { BlockList } from 'node:net';
import type { Logger } from 'pino';
import { AttachTokens } from './attach-tokens.js';
import { AuthThrottle, type AuthThrottleOptions } from './auth-throttle.js';
import { clientAddress } from './client-address.js';
import {
  authenticate,
  type Credential,
  dashboardAccessKey,
  isTokenOrAccessKey,
  presentedSecret,
} from './security.js';

/** What the gate decided: pass, 401, or 429 with a wait. */
export type GateVerdict =
  | { readonly ok: true }
  | { readonly ok: false; readonly status: number; readonly code: string; readonly message: string }
  | {
      readonly ok: false;
      readonly status: 429;
      readonly code: string;
      readonly message: string;
      readonly retryAfterSeconds: number;
    };

/**
 * Routes open without the token: `/healthz` reveals nothing; the sign-in trade checks its own code;
 * `/openapi.json` describes routes and holds no data, and client generators fetch it without
 * credentials (docs/http-api.md "Authentication").
 */
const OPEN_ROUTES = new Set(['GET /healthz', 'POST /dashboard/sign-in', 'GET /openapi.json']);

const PASS: GateVerdict = { ok: true };
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

/** What the page offers `POST /dashboard/sign-in`: the code of a sign-in link, or the token itself. */
export interface SignInOffer {
  readonly login?: string | undefined;
  readonly token?: string | undefined;
}

export interface AuthGateOptions {
  readonly throttle?: Partial<AuthThrottleOptions>;
  /** `server.trusted_proxies`: whose `X-Forwarded-For` names the client (client-address.ts). */
  readonly trustedProxies?: BlockList | null;
}

/**
 * The token check of every request and upgrade. A presented credential is checked first, in constant
 * time, and a right one always passes: only failures are slowed down, counted per client address and
 * per presented secret, so nobody can lock the owner out by sending wrong tokens (issue 34, observation
 * 4). The token and the request's query are never logged: the warn line names the address and its
 * failure count only.
 */
export class AuthGate {
  private readonly throttle: AuthThrottle;
  private readonly loginCodes = new AttachTokens(LOGIN_CODE_TTL_MS, MAX_UNUSED_LOGIN_CODES);
  private readonly trustedProxies: BlockList | null;

  constructor(
    private readonly token: string | null,
    private readonly logger: Logger,
    options: AuthGateOptions = {},
  ) {
    this.throttle = new AuthThrottle(options.throttle);
    this.trustedProxies = options.trustedProxies ?? null;
  }

  /** An HTTP request: open routes and the dashboard's files pass, else a header or (GET) `?token=` must carry the token. */
  check(request: IncomingMessage): GateVerdict {
    if (this.token === null) return PASS;
    if (OPEN_ROUTES.has(`${request.method} ${pathOf(request)}`)) return PASS;
    // The dashboard's page and assets hold no data: they load without the token, and the page signs in
    // with what its address carries (POST /dashboard/sign-in); its API calls without it get the 401.
    if (isPageFile(request)) return PASS;
    // The gateway's routes take a gateway key, which they check themselves (core/gateway): the token
    // is not theirs to ask for, and a gateway key is no credential anywhere else.
    if (pathOf(request).startsWith('/v1/')) return PASS;
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
   * by the page for its access key. The banner and `metis dashboard` print links with one, so the token
   * itself is never printed (a terminal's scrollback or a service log may be read by others). Null
   * without a token: the page needs no sign-in then.
   */
  issueLoginCode(): string | null {
    return this.token === null ? null : this.loginCodes.issue(DASHBOARD);
  }

  /**
   * The page's sign-in: a sign-in code (spent) or the token traded for the dashboard's access key,
   * which the page keeps in its own origin's storage, out of reach of every other port. A wrong offer
   * counts as a failure, as anywhere else. `key: null` when the server has no token.
   */
  signIn(request: IncomingMessage, offer: SignInOffer): { ok: true; key: string | null } | GateVerdict {
    if (this.token === null) return { ok: true, key: null };
    const byCode = offer.login !== undefined && this.loginCodes.consume(offer.login, DASHBOARD);
    const byToken = offer.token !== undefined && isTokenOrAccessKey(offer.token, this.token);
    if (byCode || byToken) return { ok: true, key: dashboardAccessKey(this.token) };
    return this.refuse(request, offer.token ?? offer.login ?? null);
  }

  private decide(request: IncomingMessage, credential: Credential | 'attach' | null): GateVerdict {
    if (credential !== null) return PASS;
    return this.refuse(request, presentedSecret(request));
  }

  /**
   * A failure: 429 while the address or the secret it presented is being slowed down, else 401 and
   * counted against both. A secret is remembered by a hash, never as given.
   */
  private refuse(request: IncomingMessage, presented: string | null): GateVerdict {
    const address = `address ${clientAddress(request, this.trustedProxies)}`;
    const secret =
      presented === null
        ? null
        : `secret ${createHash('sha256').update(presented).digest('base64url').slice(0, 22)}`;
    const wait = Math.max(
      this.throttle.retryAfterSeconds(address),
      secret === null ? 0 : this.throttle.retryAfterSeconds(secret),
    );
    if (wait > 0) return tooMany(wait);
    const outcome = this.throttle.failure(address);
    if (secret !== null) this.throttle.failure(secret);
    if (outcome.logNow) {
      this.logger.warn(
        { peer: address.slice('address '.length), failures: outcome.failures },
        'repeated requests with a missing or wrong token: answering them 429 for a while (a right token still passes)',
      );
    }
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
