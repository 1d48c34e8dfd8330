import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import { AuthThrottle, type AuthThrottleOptions } from '../http/auth-throttle.js';
import { clientAddress } from '../http/client-address.js';
import { GatewayError } from './gateway-error.js';
import type { InboundShape } from './inbound/inbound-request.js';
import type { KeyCheck } from './key-ring.js';

/** How often one failure (reason, secret, address) is recorded: a script looping on a bad key is one row a minute. */
const EVENT_INTERVAL_MS = 60_000;
const MAX_REMEMBERED = 10_000;

/**
 * The gateway's refusals of a key: `gateway.auth_failed` (bus §6.13) with the SHA-256 prefix of what
 * was presented, never the secret, at most once a minute for the same failure from the same address;
 * and the slow-down the server's own token has (auth-throttle.ts): past a few failures an address, or a
 * secret, is answered 429 for a while. A right key is checked first and always passes.
 */
export class AuthFailures {
  private readonly throttle: AuthThrottle;
  private readonly recorded = new Map<string, number>();

  constructor(
    private readonly bus: EventBus,
    private readonly logger: Logger,
    throttle: Partial<AuthThrottleOptions> = {},
  ) {
    this.throttle = new AuthThrottle(throttle);
  }

  refuse(
    request: IncomingMessage,
    check: Extract<KeyCheck, { ok: false }>,
    shape: InboundShape,
  ): GatewayError {
    const address = `address ${clientAddress(request, null)}`;
    const secret = check.hashPrefix === null ? null : `secret ${check.hashPrefix}`;
    const wait = Math.max(
      this.throttle.retryAfterSeconds(address),
      secret === null ? 0 : this.throttle.retryAfterSeconds(secret),
    );
    if (wait > 0)
      return new GatewayError('rate_limit', `too many requests with a wrong key: retry after ${wait} s`, {
        retryAfterSeconds: wait,
      });
    const outcome = this.throttle.failure(address);
    if (secret !== null) this.throttle.failure(secret);
    if (outcome.logNow)
      this.logger.warn(
        { peer: address.slice('address '.length), failures: outcome.failures },
        'repeated gateway requests with a missing or wrong key: answering them 429 for a while',
      );
    this.record(`${check.reason} ${check.hashPrefix} ${address}`, check, shape);
    return new GatewayError('authentication', messageOf(check.reason));
  }

  private record(id: string, check: Extract<KeyCheck, { ok: false }>, shape: InboundShape): void {
    const now = Date.now();
    const last = this.recorded.get(id);
    if (last !== undefined && now - last < EVENT_INTERVAL_MS) return;
    this.recorded.delete(id);
    this.recorded.set(id, now);
    if (this.recorded.size > MAX_REMEMBERED)
      this.recorded.delete(this.recorded.keys().next().value as string);
    this.bus.emit({
      type: 'gateway.auth_failed',
      session_id: SYSTEM_SESSION_ID,
      payload: {
        reason: check.reason,
        inbound_shape: shape,
        token_hash_prefix: check.hashPrefix,
        gateway_key_id: check.keyId,
      },
    });
  }
}

function messageOf(reason: Extract<KeyCheck, { ok: false }>['reason']): string {
  switch (reason) {
    case 'missing_token':
      return 'no gateway key: send one as the API key (Authorization: Bearer, or x-api-key)';
    case 'key_revoked':
      return 'this gateway key is revoked or past its rotation grace period';
    default:
      return 'this is not a gateway key of this server';
  }
}
