import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { NODE_ID_PATTERN } from '../config/schema.js';

/**
 * The proof a forwarded request carries that a node of the cluster sent it, now, once: an HMAC-SHA256,
 * keyed by the forwarding key derived from the shared token (cluster-keys.ts), over the sender, the
 * node it is for, the time, a random nonce, the method, the URL and the body. The owner runs it only
 * when the MAC is right, it is for this node, its time is within the window of the owner's clock, and
 * its nonce is not one seen within the window (a replay).
 */

/** How far a forwarded request's time may be from the owner's clock, either way. */
export const FORWARD_WINDOW_MS = 60_000;
/** Nonces remembered at most: past it, requests are refused rather than replays let through. */
const MAX_REMEMBERED = 100_000;
const MAC_LABEL = 'metis forwarded request v1';

/** A request as it is signed: the body as the JSON text sent, so both ends MAC the same bytes. */
export interface SignedRequest {
  readonly method: string;
  /** Path and query, as the client sent them. */
  readonly url: string;
  /** The body's JSON text, or null for none. */
  readonly body: string | null;
}

const SignedForwardSchema = z.strictObject({
  v: z.literal(1),
  from: z.string().regex(NODE_ID_PATTERN),
  to: z.string().regex(NODE_ID_PATTERN),
  at: z.number().int().nonnegative(),
  nonce: z.string().regex(/^[A-Za-z0-9_-]{22}$/),
  method: z.string().min(1).max(16),
  url: z.string().min(1).max(16_384),
  body: z.string().nullable(),
  mac: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
});

/** A forwarded request as it travels, with its proof. */
export type SignedForward = z.infer<typeof SignedForwardSchema>;

function macOf(key: Buffer, request: Omit<SignedForward, 'mac'>): Buffer {
  // A JSON array: each field delimited, none can be taken for its neighbour.
  const fields = [MAC_LABEL, request.from, request.to, request.at, request.nonce, request.method];
  return createHmac('sha256', key)
    .update(JSON.stringify([...fields, request.url, request.body]))
    .digest();
}

/** Signs a request `from` this node for node `to`, at `at` (now by default). */
export function signForward(
  key: Buffer,
  from: string,
  to: string,
  request: SignedRequest,
  at: number = Date.now(),
): SignedForward {
  const unsigned = {
    v: 1 as const,
    from,
    to,
    at,
    nonce: randomBytes(16).toString('base64url'),
    method: request.method,
    url: request.url,
    body: request.body,
  };
  return { ...unsigned, mac: macOf(key, unsigned).toString('base64url') };
}

/** Whether to run a forwarded request, and why not. */
export type ForwardVerdict =
  | { readonly ok: true; readonly from: string; readonly request: SignedRequest }
  | { readonly ok: false; readonly reason: string };

/**
 * Checks the forwarded requests that reach node `nodeId`. Keeps the nonces of the requests it let
 * through for twice the window (a request's time may be up to one window ahead), the oldest forgotten
 * first; only requests with a right MAC are remembered, so no one without the token can fill it.
 */
export function forwardChecker(
  key: Buffer,
  nodeId: string,
  options: { windowMs?: number; maxRemembered?: number; now?: () => number } = {},
): (envelope: unknown) => ForwardVerdict {
  const windowMs = options.windowMs ?? FORWARD_WINDOW_MS;
  const maxRemembered = options.maxRemembered ?? MAX_REMEMBERED;
  const now = options.now ?? Date.now;
  /** Nonce → when it may be forgotten (monotonic ms; insertion order is expiry order). */
  const remembered = new Map<string, number>();
  const forgetExpired = () => {
    const at = performance.now();
    for (const [nonce, until] of remembered) {
      if (until > at) break;
      remembered.delete(nonce);
    }
  };
  return (envelope) => {
    const parsed = SignedForwardSchema.safeParse(envelope);
    if (!parsed.success) return { ok: false, reason: 'it carries no proof of the cluster token' };
    const request = parsed.data;
    const given = Buffer.from(request.mac, 'base64url');
    const expected = macOf(key, request);
    if (given.length !== expected.length || !timingSafeEqual(given, expected))
      return { ok: false, reason: "its proof is not made with this cluster's token" };
    if (request.to !== nodeId) return { ok: false, reason: `it is meant for node ${request.to}` };
    const skewMs = now() - request.at;
    if (Math.abs(skewMs) > windowMs)
      return {
        ok: false,
        reason: `its time is ${Math.round(skewMs / 1000)} s from this node's clock, more than ±${windowMs / 1000} s (an old request replayed, or the nodes' clocks disagree)`,
      };
    forgetExpired();
    if (remembered.has(request.nonce)) return { ok: false, reason: 'it was sent before (a replay)' };
    if (remembered.size >= maxRemembered)
      return {
        ok: false,
        reason: `this node already holds ${maxRemembered} forwarded requests of the last ${(2 * windowMs) / 1000} s and could not tell a replay`,
      };
    remembered.set(request.nonce, performance.now() + 2 * windowMs);
    return {
      ok: true,
      from: request.from,
      request: { method: request.method, url: request.url, body: request.body },
    };
  };
}
