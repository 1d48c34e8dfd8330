/** What went wrong with a gateway request, in terms each provider's error shape has a word for. */
export type GatewayErrorKind =
  | 'invalid_request'
  | 'authentication'
  | 'permission'
  | 'not_found'
  | 'rate_limit'
  | 'quota'
  | 'upstream'
  | 'overloaded'
  | 'internal';

const STATUS: Record<GatewayErrorKind, number> = {
  invalid_request: 400,
  authentication: 401,
  permission: 403,
  not_found: 404,
  rate_limit: 429,
  quota: 429,
  upstream: 502,
  overloaded: 503,
  internal: 500,
};

/**
 * A refusal or failure of a gateway request, answered in the inbound provider's own error shape
 * (provider-errors.ts) so that its SDK raises its own error class (AuthenticationError, RateLimitError…).
 */
export class GatewayError extends Error {
  readonly status: number;
  readonly param: string | null;
  /** Seconds for `Retry-After` (a 429). */
  readonly retryAfterSeconds: number | null;
  /** Tells the SDKs not to retry (`x-should-retry: false`): a cap is not lifted by retrying. */
  readonly noRetry: boolean;

  constructor(
    readonly kind: GatewayErrorKind,
    message: string,
    options: { param?: string | null; retryAfterSeconds?: number | null; noRetry?: boolean } = {},
  ) {
    super(message);
    this.name = 'GatewayError';
    this.status = STATUS[kind];
    this.param = options.param ?? null;
    this.retryAfterSeconds = options.retryAfterSeconds ?? null;
    this.noRetry = options.noRetry ?? false;
  }
}
