import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

interface Issued {
  readonly sessionId: string;
  readonly expiresAt: number;
  readonly digest: Buffer;
}

function digestOf(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** Unused tokens kept at most; past it the oldest is forgotten (DESIGN.md: attach tokens). */
export const DEFAULT_MAX_UNUSED_TOKENS = 1000;

/**
 * Attach tokens (streaming §3.1): single use, expiring `ttlMs` after issue if unused. Tokens are kept
 * by their SHA-256, so the lookup learns nothing from timing about the token itself, and the final
 * comparison is constant-time. Tokens are never logged.
 *
 * Bounded: at most `maxUnused` wait to be used, the oldest going first, so a client that asks for
 * handshakes and never attaches costs a fixed amount of memory (20,000 of them used to cost ~30 MiB).
 */
export class AttachTokens {
  /** In issue order, which is also expiry order (one ttl for all): sweeping stops at the first live one. */
  private readonly issued = new Map<string, Issued>();

  constructor(
    private readonly ttlMs = 60_000,
    private readonly maxUnused = DEFAULT_MAX_UNUSED_TOKENS,
  ) {}

  /** Tokens issued and not yet used or expired. */
  get size(): number {
    return this.issued.size;
  }

  issue(sessionId: string): string {
    this.sweep();
    while (this.issued.size >= this.maxUnused) {
      const oldest = this.issued.keys().next().value as string;
      this.issued.delete(oldest);
    }
    const token = `atk_${randomBytes(24).toString('base64url')}`;
    const digest = digestOf(token);
    this.issued.set(digest.toString('hex'), { sessionId, expiresAt: Date.now() + this.ttlMs, digest });
    return token;
  }

  /** Consumes a token for a session: true once, false for a missing, used, expired or foreign token. */
  consume(token: string | null, sessionId: string): boolean {
    if (!token) return false;
    const digest = digestOf(token);
    const key = digest.toString('hex');
    const entry = this.issued.get(key);
    if (entry === undefined) return false;
    this.issued.delete(key);
    return (
      timingSafeEqual(entry.digest, digest) && entry.sessionId === sessionId && entry.expiresAt > Date.now()
    );
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, entry] of this.issued) {
      if (entry.expiresAt > now) return;
      this.issued.delete(key);
    }
  }
}
